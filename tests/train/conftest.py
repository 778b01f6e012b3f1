"""Fixtures shared by the PyTorch adapter's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread():
    """Two shared cores: keep torch to one intra-op thread, and restore it afterwards
    (a no-op where torch is not installed: the Opacus accountant's tests run without it)."""
    try:
        import torch
    except ImportError:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
