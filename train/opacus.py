"""dpforge as an Opacus accountant: ``PrivacyEngine(accountant="dpforge")``.

Importing this module registers :class:`DpforgeAccountant` with Opacus under the name
"dpforge" when Opacus is installed (``opacus.accountants.register_accountant``); without
Opacus the class still works on its own with the same interface (``step``,
``get_epsilon``, ``history``, ``mechanism``, ``state_dict``).  Its ``get_epsilon`` is
dpforge's certified PRV upper bound on the add/remove, Poisson-subsampled Gaussian
composition of the recorded steps.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from dpforge.budget.ledger import Ledger
from dpforge.accounting.results import EpsilonResult
from dpforge.errors import ParameterError
from dpforge.mechanisms.base import Gaussian
from dpforge.validation import require_count, require_non_negative, require_sampling_rate

try:  # pragma: no cover - depends on the environment
    from opacus.accountants import IAccountant as _Base
    from opacus.accountants import register_accountant as _register

    OPACUS_AVAILABLE = True
except ImportError:  # pragma: no cover - depends on the environment
    _Base = object  # type: ignore[assignment,misc]
    _register = None
    OPACUS_AVAILABLE = False

MECHANISM_NAME = "dpforge"


class DpforgeAccountant(_Base):  # type: ignore[misc,valid-type]
    """Opacus-compatible accountant backed by dpforge's certified engines.

    ``history`` follows Opacus' convention: a list of (noise_multiplier, sample_rate,
    steps) with consecutive equal steps merged.
    """

    def __init__(self, engine: str = "prv", relative_accuracy: float = 1e-3) -> None:
        self.history: list[tuple[float, float, int]] = []
        self.engine = engine
        self.relative_accuracy = relative_accuracy

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Record one Poisson-subsampled Gaussian step (merged into the last history entry
        when noise_multiplier and sample_rate are equal to it)."""
        noise_multiplier = require_non_negative("noise_multiplier", noise_multiplier)
        sample_rate = require_sampling_rate("sample_rate", sample_rate)
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            last = self.history[-1]
            self.history[-1] = (last[0], last[1], last[2] + 1)
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def __len__(self) -> int:
        return sum(steps for _, _, steps in self.history)

    @classmethod
    def mechanism(cls) -> str:
        """The name the accountant is registered under with Opacus: "dpforge"."""
        return MECHANISM_NAME

    def ledger(self) -> Ledger:
        """The history as a dpforge ledger (a noiseless step cannot be recorded)."""
        ledger = Ledger()
        for noise_multiplier, sample_rate, steps in self.history:
            if noise_multiplier == 0:
                raise ParameterError("a step without noise (noise_multiplier = 0) has no finite epsilon")
            ledger.record(Gaussian(noise_multiplier), sample_rate, steps)
        return ledger

    def get_epsilon_result(self, delta: float) -> EpsilonResult:
        """Full :class:`EpsilonResult` (certified lower and upper bounds with the PRV
        engine) for the recorded steps at ``delta``; ValueError after a noiseless step."""
        return self.ledger().epsilon(delta, engine=self.engine, **self._options())

    def get_epsilon(self, delta: float, *args: Any, **kwargs: Any) -> float:
        """Certified upper bound on epsilon at ``delta`` (0 before any step, inf after a noiseless one)."""
        if not self.history:
            return 0.0
        if any(noise_multiplier == 0 for noise_multiplier, _, _ in self.history):
            return math.inf
        return float(self.get_epsilon_result(delta).upper)

    def _options(self) -> dict[str, Any]:
        return {"relative_accuracy": self.relative_accuracy} if self.engine == "prv" else {}

    # Opacus' IAccountant provides these; repeated so the class works without Opacus.
    def state_dict(self, destination: Any = None) -> Any:
        """``destination`` (a new OrderedDict by default) with "history" and "mechanism" set."""
        destination = OrderedDict() if destination is None else destination
        destination["history"] = list(self.history)
        destination["mechanism"] = self.mechanism()
        return destination

    def load_state_dict(self, state_dict: Any) -> None:
        """Restore ``history`` from :meth:`state_dict` output; ValueError without a history
        or for another accountant's state."""
        if not state_dict or "history" not in state_dict:
            raise ParameterError("state_dict must contain a 'history'")
        if state_dict.get("mechanism", MECHANISM_NAME) != MECHANISM_NAME:
            raise ParameterError(f"state_dict is for accountant {state_dict['mechanism']!r}, not {MECHANISM_NAME!r}")
        history = []
        for index, entry in enumerate(state_dict["history"]):
            try:
                noise_multiplier, sample_rate, steps = entry
            except (TypeError, ValueError):
                raise ParameterError(
                    f"state_dict['history'][{index}] must be (noise_multiplier, sample_rate, steps), got {entry!r}"
                ) from None
            where = f"state_dict['history'][{index}]"
            history.append(
                (
                    require_non_negative(f"{where} noise_multiplier", noise_multiplier),
                    require_sampling_rate(f"{where} sample_rate", sample_rate),
                    require_count(f"{where} steps", steps, 1),
                )
            )
        self.history = history


def register_with_opacus() -> bool:
    """Register the accountant as "dpforge" with Opacus; False when Opacus is missing."""
    if _register is None:
        return False
    _register(MECHANISM_NAME, DpforgeAccountant, force=True)
    return True


register_with_opacus()
