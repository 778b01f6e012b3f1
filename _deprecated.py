"""Names that moved in the 0.2 layout, kept for one release as aliases that warn.

:data:`MOVED_MODULES` maps an old module path to its new one; importing the old path
returns the new module and issues a :class:`DeprecationWarning`.  :data:`MOVED_NAMES`
maps a package's old public attribute to the module that now holds it; the package's
``__getattr__`` (PEP 562) calls :func:`moved_name`.  Both are plain tables of strings,
resolved with :mod:`importlib` on first use: the layered imports of the code itself
(``tests/test_layers.py``) are not bent by them.  They go away in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

MOVED_MODULES: dict[str, str] = {
    "dpforge.mechanisms.validation": "dpforge.validation",
    "dpforge.mechanisms.lmo_search": "dpforge.design.search",
    "dpforge.mechanisms.lmo_published": "dpforge.accounting.rdp.published",
    "dpforge.mechanisms.torch_noise": "dpforge.train.noise",
    "dpforge.mechanisms.torch_dpsgd": "dpforge.train.dpsgd",
    "dpforge.mechanisms.torch_dpzo": "dpforge.train.dpzo",
    "dpforge.mechanisms.torch_distributed": "dpforge.train.distributed",
    "dpforge.mechanisms.torch_bitfit": "dpforge.train.bitfit",
    "dpforge.accounting.allocation": "dpforge.mechanisms.allocation",
    "dpforge.accounting.rdp_lmo": "dpforge.accounting.rdp.lmo",
    "dpforge.accounting.discretise": "dpforge.accounting.prv.discretise",
    "dpforge.accounting.discrete_loss": "dpforge.accounting.prv.discrete_loss",
    "dpforge.accounting.montecarlo_kernels": "dpforge.accounting.montecarlo.kernels",
    "dpforge.accounting.plan": "dpforge.budget.plan",
    "dpforge.accounting.ledger": "dpforge.budget.ledger",
    "dpforge.accounting.opacus_accountant": "dpforge.train.opacus",
}

MOVED_NAMES: dict[str, dict[str, str]] = {
    "dpforge.accounting": {
        **{name: "dpforge.budget" for name in (
            "Ledger", "Phase", "Plan", "PlanError", "load_plan", "parse_plan", "verify_plan", "write_plan")},
        **{name: "dpforge.mechanisms.allocation" for name in (
            "allocate_noise", "effective_noise_multiplier", "geometric_threshold_update", "gradient_noise_multiplier")},
    },
    "dpforge.mechanisms": {"lmo_search": "dpforge.design", "LMOSearchResult": "dpforge.design"},
    "dpforge.accounting.api": {
        "delta_profile": "dpforge.accounting.profiles",
        "initial_step": "dpforge.accounting.prv.evaluate",
        "MAX_GRID": "dpforge.accounting.prv.evaluate",
    },
    "dpforge.accounting.prv": {
        name: "dpforge.accounting.prv.components"
        for name in ("MAX_LOSS", "Truncation", "atom_aligned_step", "bulk_spread", "directions_for",
                     "discretise_all", "loss_moments", "single_step_moments", "truncation")
    },
    "dpforge.budget.plan": {name: "dpforge.budget.verify" for name in ("PhaseCheck", "VerifyReport", "verify_plan")},
}


def _caller_stacklevel() -> int:
    """The stack level of the first frame outside the import machinery and this module."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib") or frame.f_code.co_filename == __file__):
        frame, level = frame.f_back, level + 1
    return level


def moved_name(package: str, name: str) -> Any:
    """The object an old ``package.name`` now refers to (with a DeprecationWarning), or
    AttributeError when ``name`` never existed there."""
    target = MOVED_NAMES.get(package, {}).get(name)
    if target is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(
        f"{package}.{name} moved to {target}.{name}; the old name goes away in dpforge 0.3",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(target), name)


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path as its new module, with a DeprecationWarning."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new = MOVED_MODULES[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes away in dpforge 0.3",
            DeprecationWarning,
            stacklevel=_caller_stacklevel(),
        )
        return importlib.import_module(new)

    def exec_module(self, module):
        """Nothing to run: the module is the new one, already imported."""


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
