"""The engine's allocator thresholds (glibc's mallopt), and the opt-out."""

from __future__ import annotations

import ctypes.util
import sys

import pytest

from dpforge.accounting.prv import allocator

glibc = sys.platform.startswith("linux") and "libc.so" in (ctypes.util.find_library("c") or "")


@pytest.mark.skipif(not glibc, reason="mallopt is glibc's")
def test_thresholds_are_set_on_glibc(monkeypatch):
    monkeypatch.delenv("DPFORGE_MALLOC_DEFAULTS", raising=False)
    assert allocator.raise_thresholds() is True


def test_the_opt_out_leaves_the_allocator_alone(monkeypatch):
    monkeypatch.setenv("DPFORGE_MALLOC_DEFAULTS", "1")
    assert allocator.raise_thresholds() is False

