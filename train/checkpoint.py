"""One atomic checkpoint for the model, the optimizer and dpforge's privacy state.

``save_checkpoint(path, model=..., optimizer=..., dpforge=noise_step)`` writes one file
with ``torch.save`` through :mod:`dpforge.files` (temporary file, fsync, rename): a kill
during the save leaves the previous checkpoint whole.  ``dpforge`` is any object with
``state_dict`` / ``load_state_dict`` (:class:`~dpforge.train.dpsgd.DPSGDNoiseStep`,
:class:`~dpforge.budget.ledger.Ledger`, the Opacus accountant) or a dict of them by name;
a :class:`~dpforge.train.dpzo.DPZero` optimizer carries its privacy state in its own
``state_dict``.  Before writing, every journal of the given objects' ledgers is fsync'd,
so the journal on disk always holds at least the checkpoint's steps.

Loading uses ``torch.load(weights_only=True)``: a checkpoint holds tensors, numbers,
strings, lists and dicts only, and no code runs on load.
"""

from __future__ import annotations

import os
import pickle
from typing import Any, Mapping

import torch

from dpforge.errors import InputFileError, ParameterError
from dpforge.files import atomic_write_with

__all__ = ["FORMAT", "load_checkpoint", "save_checkpoint"]

FORMAT = "dpforge-checkpoint/1"


def _named(dpforge: Any) -> dict[str, Any]:
    if dpforge is None:
        return {}
    if isinstance(dpforge, Mapping):
        return dict(dpforge)
    return {"dpforge": dpforge}


def _sync_journals(objects: list[Any]) -> None:
    for item in objects:
        ledger = getattr(item, "ledger", item)
        journal = getattr(ledger, "journal", None)
        if journal is not None and hasattr(journal, "sync"):
            journal.sync()


def save_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    dpforge: Any = None,
    extra: Any = None,
) -> None:
    """Write model, optimizer, dpforge state (and ``extra``, e.g. the data loader's
    position) to ``path`` atomically; see the module docstring."""
    named = _named(dpforge)
    _sync_journals([*named.values(), optimizer])
    payload = {
        "format": FORMAT,
        "model": None if model is None else model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "dpforge": {name: item.state_dict() for name, item in named.items()},
        "extra": extra,
    }
    atomic_write_with(path, lambda handle: torch.save(payload, handle))


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    dpforge: Any = None,
) -> Any:
    """Load what :func:`save_checkpoint` wrote into the given objects; return ``extra``.

    An unreadable file or one without a part that was asked for is an InputFileError.
    """
    try:
        payload = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as error:
        raise InputFileError(f"cannot read checkpoint {os.fspath(path)}: {' '.join(str(error).split())[:200]}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise InputFileError(f"{os.fspath(path)} is not a dpforge checkpoint ({FORMAT})")
    named = _named(dpforge)
    for name, target, state in (("model", model, payload["model"]), ("optimizer", optimizer, payload["optimizer"])):
        if target is not None:
            if state is None:
                raise InputFileError(f"checkpoint {os.fspath(path)} holds no {name} state")
            target.load_state_dict(state)
    for name, item in named.items():
        if name not in payload["dpforge"]:
            raise InputFileError(f"checkpoint {os.fspath(path)} holds no dpforge state named {name!r}")
        item.load_state_dict(payload["dpforge"][name])
    unknown = set(payload["dpforge"]) - set(named)
    if named and unknown:
        raise ParameterError(f"checkpoint holds dpforge state {sorted(unknown)[0]!r} that was not given to load it into")
    return payload["extra"]
