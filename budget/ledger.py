"""The ledger: what a training run actually did, step by step, and what it cost.

Every private step records its mechanism and sampling rate; consecutive equal steps
are merged into one phase, so a ledger of a million identical steps is one entry.  The
ledger accounts itself with any engine (the certified PRV engine by default), and
writes the plan file that ``dpforge verify`` checks in CI.

Durability (docs/design.md §7): :meth:`Ledger.state_dict` / :meth:`Ledger.load_state_dict`
checkpoint it; :meth:`Ledger.attach_journal` makes every record go first to an
append-only :class:`~dpforge.budget.journal.RunJournal`, from which
:meth:`Ledger.from_journal` rebuilds it after a crash.  The ledger also keeps where each
role's noise came from (``noise_sources``: ``{"kind": "seeded", "seed": s}``,
``{"kind": "os-entropy"}`` or ``{"kind": "secure"}``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpforge.accounting.api import epsilon as account_epsilon
from dpforge.budget.plan import Phase, Plan, PlanError, write_plan
from dpforge.errors import InputFileError, ParameterError, UnsupportedError
from dpforge.files import atomic_write_text
from dpforge.accounting.results import EpsilonResult
from dpforge.mechanisms.base import Mechanism
from dpforge.mechanisms.combinators import Composed, PoissonSampled
from dpforge.mechanisms.serialize import mechanism_from_dict, mechanism_to_dict
from dpforge.validation import require_count, require_sampling_rate

if TYPE_CHECKING:  # pragma: no cover - typing only
    from dpforge.budget.journal import Recovered, RunJournal


@dataclass(frozen=True)
class LedgerEntry:
    """``steps`` consecutive releases of ``mechanism`` on Poisson subsamples of rate ``sampling_rate``."""

    mechanism: Mechanism
    sampling_rate: float
    steps: int

    def description(self) -> Composed:
        """``Composed([(step, steps)])`` with step the mechanism, Poisson-subsampled when
        ``sampling_rate < 1``."""
        step = PoissonSampled(self.mechanism, self.sampling_rate) if self.sampling_rate < 1.0 else self.mechanism
        return Composed([(step, self.steps)])


class Ledger:
    """Append-only record of private steps (not thread-safe; one per training process)."""

    def __init__(self, journal: "RunJournal | None" = None) -> None:
        self._entries: list[LedgerEntry] = []
        self.noise_sources: dict[str, dict[str, Any]] = {}
        self.journal: "RunJournal | None" = None
        if journal is not None:
            self.attach_journal(journal)

    def attach_journal(self, journal: "RunJournal") -> None:
        """Journal every later record (and noise source) in ``journal`` before it is kept.

        The journal must already hold this ledger's steps (a new journal for a new
        ledger, or the journal a resumed ledger was checkpointed with; ParameterError
        otherwise).  Steps the journal holds beyond the ledger's (released after the last
        checkpoint) are checked, not repeated, when the resumed run records them again.
        """
        if journal.released < self.steps:
            raise ParameterError(
                f"the journal holds {journal.released} released steps but the ledger {self.steps}: "
                "attach the journal the run was writing (or a new one before the first step)"
            )
        self.journal = journal
        for role, source in self.noise_sources.items():
            journal.note_noise_source(role, source)

    def note_noise_source(self, role: str, source: dict[str, Any]) -> None:
        """Record where the noise of ``role`` (e.g. ``"dpsgd"``) comes from."""
        self.noise_sources[str(role)] = dict(source)
        if self.journal is not None:
            self.journal.note_noise_source(str(role), dict(source))

    def record(
        self, mechanism: Mechanism, sampling_rate: float = 1.0, steps: int = 1, *, release: str | None = None
    ) -> None:
        """Record ``steps`` releases of ``mechanism`` at ``sampling_rate`` (merged with the
        previous entry when both are equal).  With a journal attached, the record is
        journaled first (``release``: an optional digest of the released value, see
        :meth:`~dpforge.budget.journal.RunJournal.append_step`)."""
        if not isinstance(mechanism, Mechanism):
            raise ParameterError(f"mechanism must be a dpforge mechanism, got {type(mechanism).__name__}")
        serialised = mechanism_to_dict(mechanism)  # refuses what the ledger cannot serialise
        rate = require_sampling_rate("sampling_rate", sampling_rate)
        count = require_count("steps", steps)
        if self.journal is not None:
            self.journal.append_step(self.steps, serialised, rate, count, release)
        if self._entries and self._entries[-1].mechanism == mechanism and self._entries[-1].sampling_rate == rate:
            last = self._entries[-1]
            self._entries[-1] = LedgerEntry(mechanism, rate, last.steps + count)
        else:
            self._entries.append(LedgerEntry(mechanism, rate, count))

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """The recorded phases in order (consecutive equal steps merged)."""
        return tuple(self._entries)

    @property
    def steps(self) -> int:
        """Total number of recorded releases over all entries."""
        return sum(entry.steps for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def description(self) -> Composed:
        """The whole run as one :class:`Composed` description; ValueError when empty."""
        if not self._entries:
            raise ParameterError("the ledger is empty: record at least one step before accounting")
        return Composed([part for entry in self._entries for part in entry.description().parts])

    def epsilon(self, delta: float, engine: str = "prv", **options: Any) -> EpsilonResult:
        """Bounds on the run's epsilon at ``delta`` (certified with the default PRV engine)."""
        return account_epsilon(self.description(), delta, engine=engine, **options)

    def to_plan(self, path: str | os.PathLike[str] | None, delta: float, budget_epsilon: float | None = None) -> Plan:
        """The plan ``dpforge verify`` checks; written as TOML to ``path`` unless it is None.

        Plan files hold Gaussian, scalar Laplace, pure-DP and LMO phases; a vector release
        is refused with the reason (the JSON form of the ledger keeps it).
        """
        phases = []
        for index, entry in enumerate(self._entries):
            try:
                phases.append(Phase.from_mechanism(entry.mechanism, entry.sampling_rate, entry.steps))
            except PlanError as error:
                raise UnsupportedError(
                    f"entries[{index}]: {error.problem}; save the ledger with to_json and account it with Ledger.epsilon"
                ) from None
        if not phases:
            raise ParameterError("the ledger is empty: record at least one step before writing a plan")
        plan = Plan(delta=delta, phases=tuple(phases), budget_epsilon=budget_epsilon)
        if path is not None:
            write_plan(plan, path)
        return plan

    def to_dict(self) -> dict[str, Any]:
        """``{"entries": [{"mechanism": {...}, "sampling_rate": q, "steps": n}, ...]}``, with
        ``"noise_sources"`` when any was noted."""
        data: dict[str, Any] = {
            "entries": [
                {"mechanism": mechanism_to_dict(e.mechanism), "sampling_rate": e.sampling_rate, "steps": e.steps}
                for e in self._entries
            ]
        }
        if self.noise_sources:
            data["noise_sources"] = {role: dict(source) for role, source in self.noise_sources.items()}
        return data

    def save_json(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` to ``path`` atomically (:mod:`dpforge.files`)."""
        atomic_write_text(path, self.to_json() + "\n")

    @classmethod
    def load_json(cls, path: str | os.PathLike[str]) -> "Ledger":
        """Read a ledger :meth:`save_json` wrote; a damaged file is a one-line InputFileError."""
        source = os.fspath(path)
        try:
            with open(source, "rb") as handle:
                data = json.loads(handle.read().decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise InputFileError(f"{source}: cannot read ledger: {' '.join(str(error).split())}") from None
        return cls.from_dict(data)

    def state_dict(self) -> dict[str, Any]:
        """Checkpoint state: :meth:`to_dict` (plain lists, dicts, numbers and strings)."""
        return self.to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the entries and noise sources with those of :meth:`state_dict` output
        (the attached journal, if any, stays and must hold at least these steps)."""
        loaded = Ledger.from_dict(state)
        if self.journal is not None and self.journal.released < loaded.steps:
            raise ParameterError(
                f"the attached journal holds {self.journal.released} released steps, fewer than the {loaded.steps} loaded"
            )
        self._entries = list(loaded._entries)
        self.noise_sources = dict(loaded.noise_sources)

    @classmethod
    def from_journal(cls, journal: "str | os.PathLike[str] | Recovered") -> "Ledger":
        """The ledger of every complete step record of a journal (a path or what
        :func:`~dpforge.budget.journal.read_journal` recovered); a torn tail is left out."""
        from dpforge.budget.journal import read_journal

        recovered = journal if hasattr(journal, "records") else read_journal(journal)  # type: ignore[arg-type]
        ledger = cls()
        for record in recovered.records:  # type: ignore[union-attr]
            if record.kind == "noise-source":
                ledger.noise_sources[record.data["role"]] = dict(record.data["source"])
                continue
            try:
                mechanism = mechanism_from_dict(record.data["mechanism"])
                ledger.record(mechanism, record.data["sampling_rate"], record.data["steps"])
            except ValueError as error:
                raise InputFileError(f"journal record {record.seq}: {error}") from None
        return ledger

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ledger":
        """Inverse of :meth:`to_dict` (entries re-recorded, so equal neighbours merge);
        malformed entries are a one-line ValueError naming the entry."""
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            raise InputFileError("a ledger must be an object with an 'entries' list")
        ledger = cls()
        for index, item in enumerate(data["entries"]):
            try:
                ledger.record(mechanism_from_dict(item["mechanism"]), item["sampling_rate"], item["steps"])
            except (KeyError, TypeError):
                raise InputFileError(f"entries[{index}] needs 'mechanism', 'sampling_rate' and 'steps'") from None
            except ValueError as error:
                raise InputFileError(f"entries[{index}]: {error}") from None
        sources = data.get("noise_sources", {})
        if not isinstance(sources, dict) or not all(isinstance(v, dict) for v in sources.values()):
            raise InputFileError("a ledger's 'noise_sources' must map roles to objects")
        ledger.noise_sources = {str(role): dict(source) for role, source in sources.items()}
        return ledger
