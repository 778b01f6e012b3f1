"""Training plan files: what a private training run will do, phase by phase, and its budget.

A plan is a small TOML file (parsed with the standard library's ``tomllib`` only; no
code is ever executed)::

    delta = 1e-5            # required, in (0, 1)

    [budget]                # optional
    epsilon = 8.0           # >= 0

    [[phases]]              # at least one
    name = "warmup"         # optional string
    noise = "gaussian"      # "gaussian" | "laplace" | "pure" | "lmo"
    noise_multiplier = 1.1  # gaussian only, > 0
    sampling_rate = 0.004   # in (0, 1]; optional, default 1.0
    steps = 1000            # integer >= 1
    sensitivity = 1.0       # optional, > 0

    [[phases]]
    noise = "laplace"
    scale = 2.0             # laplace only, > 0
    sampling_rate = 0.01
    steps = 100

    [[phases]]
    noise = "pure"          # any epsilon-DP release
    epsilon = 0.1           # pure only, >= 0
    steps = 10

    [[phases]]
    noise = "lmo"           # LMO noise: the fields of dpforge.mechanisms.LMO
    weights = [0.5, 0.5, 0.0]
    gamma_shape = 3.0       # ... gamma_scale, exponential_rate, uniform_low, uniform_high
    steps = 100

A phase's mechanism fields are those of the one mechanism serialisation
(:mod:`dpforge.mechanisms.serialize`), with the kind written ``noise``.
:func:`dpforge.budget.verify.verify_plan` accounts the phases cumulatively with the certified PRV engine and
checks the final upper bound on epsilon against the budget.  Every problem with a plan
raises :class:`PlanError` (a ``ValueError``) whose one-line message names the field
path, e.g. ``phases[1].noise_multiplier: must be a number > 0, got -1``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import tomllib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from dpforge import _deprecated
from dpforge.budget.inputs import MAX_NESTING, UnreadableFileError, check_nesting, read_text
from dpforge.errors import InputFileError, ParameterError
from dpforge.mechanisms.base import Mechanism
from dpforge.mechanisms.combinators import Composed, PoissonSampled
from dpforge.validation import LARGEST_COUNT, shown
from dpforge.mechanisms.lmo import LMO
from dpforge.mechanisms.serialize import mechanism_from_dict, mechanism_to_dict
from dpforge.budget.phase_sampling import (
    PHASE_SAMPLING_KEYS,
    check_one_relation,
    check_phase_sampling,
    phase_description,
    plan_description,
    sampling_keys,
)

__all__ = [
    "NOISE_KINDS",
    "NOISE_PARAMETERS",
    "PHASE_PARAMETERS",
    "Phase",
    "Plan",
    "PlanError",
    "load_plan",
    "parse_plan",
    "plan_to_toml",
    "write_plan",
]

#: The noise families of the command line's mechanism flags, and each one's parameter.
NOISE_PARAMETERS: dict[str, str] = {"gaussian": "noise_multiplier", "laplace": "scale"}
#: The phase kinds with one parameter, and its name (a pure-DP phase states its epsilon).
PHASE_PARAMETERS: dict[str, str] = {**NOISE_PARAMETERS, "pure": "epsilon"}
#: Every noise family a phase may use ("lmo" has a shape of several fields, no single parameter).
NOISE_KINDS: tuple[str, ...] = (*PHASE_PARAMETERS, "lmo")
#: The LMO fields a phase may carry (besides sensitivity).
_LMO_FIELDS = tuple(name for name in LMO.__dataclass_fields__ if name != "sensitivity")

_TOP_LEVEL_KEYS = ("delta", "budget", "phases")
_BUDGET_KEYS = ("epsilon",)
_PHASE_COMMON_KEYS = ("name", "noise", "sampling_rate", "steps", "sensitivity", *PHASE_SAMPLING_KEYS)
_DEFAULT_SOURCE = "<string>"


class PlanError(InputFileError):
    """An invalid plan.  ``str(error)`` is one line: ``[source: ]field: problem``."""

    def __init__(self, field: str, problem: str, source: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.source = source
        located = f"{field}: {problem}" if field else problem
        super().__init__(f"{source}: {located}" if source else located)

    def __reduce__(self):
        return (PlanError, (self.field, self.problem, self.source))

    def at(self, prefix: str) -> "PlanError":
        """The same problem with its field path nested under ``prefix`` (e.g. ``phases[2]``)."""
        field_path = f"{prefix}.{self.field}" if self.field else prefix
        return PlanError(field_path, self.problem, self.source)

    def located(self, source: str) -> "PlanError":
        """The same problem, attributed to the file or string ``source``."""
        return PlanError(self.field, self.problem, source)


# --------------------------------------------------------------------------- checks


def _show(value: Any) -> str:
    """A value as it would be written in TOML, for error messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "an array"
    return shown(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(field_name: str, value: Any, condition: str, accept: Callable[[float], bool]) -> float:
    """``value`` as a float when it is a finite number satisfying ``accept``, else PlanError."""
    if not _is_number(value):
        raise PlanError(field_name, f"must be a number {condition}, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the double range
        raise PlanError(field_name, f"must be a finite number {condition}, got {_show(value)}") from None
    if not math.isfinite(number):
        raise PlanError(field_name, f"must be a finite number {condition}, got {_show(value)}")
    if not accept(number):
        raise PlanError(field_name, f"must be a number {condition}, got {_show(value)}")
    return number


def _positive(field_name: str, value: Any) -> float:
    return _number(field_name, value, "> 0", lambda x: x > 0.0)


def _non_negative(field_name: str, value: Any) -> float:
    return _number(field_name, value, ">= 0", lambda x: x >= 0.0)


def _delta(field_name: str, value: Any) -> float:
    return _number(field_name, value, "in (0, 1)", lambda x: 0.0 < x < 1.0)


def _sampling_rate(field_name: str, value: Any) -> float:
    return _number(field_name, value, "in (0, 1]", lambda x: 0.0 < x <= 1.0)


def _steps(field_name: str, value: Any) -> int:
    """An integer in [1, 2**53]; an integral float such as 10.0 is accepted, 10.5 is not."""
    problem = f"must be an integer >= 1 and at most 2**53, got {_show(value)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(field_name, problem)
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise PlanError(field_name, problem)
    steps = int(value)
    if not 1 <= steps <= LARGEST_COUNT:
        raise PlanError(field_name, problem)
    return steps


def _name(field_name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise PlanError(field_name, f"must be a string, got {_show(value)}")
    return value


def _noise(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or value not in NOISE_KINDS:
        allowed = ", ".join(f'"{noise}"' for noise in NOISE_KINDS[:-1]) + f' or "{NOISE_KINDS[-1]}"'
        raise PlanError(field_name, f"must be {allowed}, got {_show(value)}")
    return value


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Phase:
    """``steps`` releases of one noise mechanism, each on a Poisson subsample of rate ``sampling_rate``.

    ``parameter`` is the noise parameter of the family: the ``noise_multiplier`` for
    ``noise="gaussian"`` (noise std / L2 sensitivity), the Laplace ``scale`` for
    ``noise="laplace"``, the ``epsilon`` of an epsilon-DP release for ``noise="pure"``;
    an ``noise="lmo"`` phase has no single parameter (None) and keeps its LMO fields in
    ``shape`` as (name, value) pairs.  Values are checked and normalised (floats,
    integer steps).  :meth:`from_mechanism` builds a phase from any mechanism.
    """

    noise: str
    parameter: float | None = None
    sampling_rate: float = 1.0
    steps: int = 1
    sensitivity: float = 1.0
    name: str | None = None
    shape: tuple[tuple[str, Any], ...] = ()
    #: the sampling scheme ("poisson", "without-replacement", "shuffled"), its batch and
    #: dataset sizes (fixed-size schemes: the rate is batch_size/dataset_size), and the
    #: neighbouring relation (one per plan); see :mod:`dpforge.budget.phase_sampling`
    sampling_scheme: str = "poisson"
    batch_size: int | None = None
    dataset_size: int | None = None
    relation: str = "add-remove"

    def __post_init__(self) -> None:
        noise = _noise("noise", self.noise)
        if noise == "lmo":
            if self.parameter is not None:
                raise PlanError("parameter", "an lmo phase has no single noise parameter (its shape is in 'shape')")
        elif noise == "pure":
            object.__setattr__(self, "parameter", _non_negative("epsilon", self.parameter))
        else:
            object.__setattr__(self, "parameter", _positive(PHASE_PARAMETERS[noise], self.parameter))
        object.__setattr__(self, "sampling_rate", _sampling_rate("sampling_rate", self.sampling_rate))
        object.__setattr__(self, "steps", _steps("steps", self.steps))
        object.__setattr__(self, "sensitivity", _positive("sensitivity", self.sensitivity))
        _name("name", self.name)
        shape = tuple((str(key), tuple(value) if isinstance(value, list) else value) for key, value in dict(self.shape).items())
        if shape and noise != "lmo":
            raise PlanError("shape", f"only an lmo phase has a shape, not a {noise} phase")
        object.__setattr__(self, "shape", shape)
        try:
            checked = check_phase_sampling(
                self.sampling_scheme, self.batch_size, self.dataset_size, self.relation, self.sampling_rate, self.steps
            )
        except InputFileError as error:
            field, _, problem = str(error).partition(": ")
            raise PlanError(field, problem) from None
        for key, value in checked.items():
            object.__setattr__(self, key, value)
        self.mechanism()  # every field is checked by the mechanism itself

    @classmethod
    def from_mechanism(cls, mechanism: Mechanism, sampling_rate: float = 1.0, steps: int = 1, name: str | None = None) -> "Phase":
        """The phase of ``steps`` releases of ``mechanism`` (any mechanism the one
        serialisation writes: Gaussian, scalar Laplace, pure-DP, LMO)."""
        data = mechanism_to_dict(mechanism)
        noise = data.pop("mechanism")
        if noise == "laplace" and (data.pop("dimension") != 1 or data.pop("norm") != "l1"):
            raise PlanError("noise", f"plan files hold scalar Laplace phases, not {mechanism!r}")
        if noise == "lmo":
            sensitivity = data.pop("sensitivity")
            return cls("lmo", None, sampling_rate, steps, sensitivity, name, tuple(data.items()))
        parameter = data.pop(PHASE_PARAMETERS[noise])
        return cls(noise, parameter, sampling_rate, steps, data.get("sensitivity", 1.0), name)

    @property
    def parameter_name(self) -> str | None:
        """``"noise_multiplier"`` (gaussian), ``"scale"`` (laplace), ``"epsilon"`` (pure), None (lmo)."""
        return PHASE_PARAMETERS.get(self.noise)

    def mechanism(self) -> Mechanism:
        """The single-step mechanism (without subsampling), read through the one serialisation."""
        if self.noise == "lmo":
            data = {"noise": "lmo", **dict(self.shape), "sensitivity": self.sensitivity}
        elif self.noise == "pure":
            data = {"noise": "pure", "epsilon": self.parameter}
        else:
            data = {"noise": self.noise, PHASE_PARAMETERS[self.noise]: self.parameter, "sensitivity": self.sensitivity}
        try:
            return mechanism_from_dict(data, kind_key="noise")
        except InputFileError as error:
            raise PlanError("", str(error)) from None

    def description(self) -> Composed:
        """``steps`` compositions of the (Poisson-subsampled when the rate is < 1) mechanism."""
        mechanism = self.mechanism()
        if self.sampling_scheme != "poisson" or self.relation != "add-remove":
            return phase_description(
                mechanism, self.sampling_scheme, self.sampling_rate, self.steps, self.batch_size, self.dataset_size, self.relation
            )
        step = PoissonSampled(mechanism, self.sampling_rate) if self.sampling_rate < 1.0 else mechanism
        return Composed([(step, self.steps)])

    def label(self, index: int) -> str:
        """The phase's name, or ``phases[index]`` when it has none."""
        return self.name if self.name else f"phases[{index}]"


@dataclass(frozen=True)
class Plan:
    """A training plan: the ``delta`` to account at, the phases in order and an optional budget."""

    delta: float
    phases: tuple[Phase, ...]
    budget_epsilon: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "delta", _delta("delta", self.delta))
        phases = tuple(self.phases) if isinstance(self.phases, (list, tuple)) else self.phases
        if not isinstance(phases, tuple):
            raise PlanError("phases", f"must be a sequence of Phase, got {type(self.phases).__name__}")
        if not phases:
            raise PlanError("phases", "at least one phase is required")
        for index, phase in enumerate(phases):
            if not isinstance(phase, Phase):
                raise PlanError(f"phases[{index}]", f"must be a Phase, got {type(phase).__name__}")
        object.__setattr__(self, "phases", phases)
        try:
            check_one_relation([phase.relation for phase in phases])
        except InputFileError as error:
            field, _, problem = str(error).partition(": ")
            raise PlanError(field, problem) from None
        if self.budget_epsilon is not None:
            object.__setattr__(self, "budget_epsilon", _non_negative("budget.epsilon", self.budget_epsilon))

    def description(self, upto: int | None = None) -> Composed:
        """Composition of the first ``upto`` phases (all phases when ``upto`` is None)."""
        count = len(self.phases) if upto is None else upto
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(self.phases):
            raise ParameterError(f"upto must be an integer in [1, {len(self.phases)}], got {upto!r}")
        phases = self.phases[:count]
        return plan_description([phase.description() for phase in phases], [phase.relation for phase in phases])


# --------------------------------------------------------------------------- parsing


def _reject_unknown_keys(where: str, table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Raise naming the first key of ``table`` not in ``allowed`` (with a spelling suggestion)."""
    for key in table:
        if key in allowed:
            continue
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.8)
        if close:
            suggestion = f" (did you mean {close[0]!r}?)"
        else:
            suggestion = f" (allowed: {', '.join(allowed)})"
        kind = "key" if where else "top-level key"
        raise PlanError(where, f"unknown {kind} {key!r}{suggestion}")


def _required(where: str, table: Mapping[str, Any], key: str, why: str = "") -> Any:
    if key not in table:
        raise PlanError(f"{where}.{key}" if where else key, f"missing{why}")
    return table[key]


def _parse_phase(index: int, table: Any) -> Phase:
    where = f"phases[{index}]"
    if not isinstance(table, Mapping):
        raise PlanError(where, f"must be a table ([[phases]]), got {_show(table)}")
    kinds = ", ".join(f'"{noise}"' for noise in NOISE_KINDS)
    noise = _noise(f"{where}.noise", _required(where, table, "noise", f" (one of {kinds})"))
    parameter_name = PHASE_PARAMETERS.get(noise)
    own = _LMO_FIELDS if noise == "lmo" else (parameter_name,)
    for other_noise, other_parameter in PHASE_PARAMETERS.items():
        if other_noise != noise and other_parameter in table and other_parameter not in own:
            takes = f"takes {parameter_name!r}" if parameter_name else "takes the LMO fields"
            raise PlanError(
                where,
                f"key {other_parameter!r} does not apply to a {noise} phase "
                f"(a {noise} phase {takes}; {other_parameter!r} is for {other_noise})",
            )
    common = _PHASE_COMMON_KEYS if noise != "pure" else tuple(k for k in _PHASE_COMMON_KEYS if k != "sensitivity")
    _reject_unknown_keys(where, table, common + own)
    steps = _required(where, table, "steps")
    if noise == "lmo":
        parameter, shape = None, tuple((key, table[key]) for key in _LMO_FIELDS if key in table)
        _required(where, table, "weights", " (an lmo phase needs its mixture weights)")
        for key, value in shape:
            if key in ("dimension", "norm"):
                continue
            if key == "weights":
                if not isinstance(value, list) or not all(_is_number(v) for v in value):
                    raise PlanError(f"{where}.weights", f"must be an array of numbers, got {_show(value)}")
            else:
                _number(f"{where}.{key}", value, "(finite)", lambda v: True)
    else:
        parameter, shape = _required(where, table, parameter_name, f" (required for a {noise} phase)"), ()
    try:
        return Phase(
            noise=noise,
            parameter=parameter,
            sampling_rate=table.get("sampling_rate", 1.0),
            steps=steps,
            sensitivity=table.get("sensitivity", 1.0),
            name=table.get("name"),
            shape=shape,
            **sampling_keys(table),
        )
    except PlanError as error:
        raise error.at(where) from None


def _parse_budget(budget: Any) -> float:
    if not isinstance(budget, Mapping):
        raise PlanError("budget", f"must be a table ([budget]), got {_show(budget)}")
    _reject_unknown_keys("budget", budget, _BUDGET_KEYS)
    return _non_negative("budget.epsilon", _required("budget", budget, "epsilon"))


def _parse_document(document: Mapping[str, Any]) -> Plan:
    _reject_unknown_keys("", document, _TOP_LEVEL_KEYS)
    delta = _delta("delta", _required("", document, "delta", " (a number in (0, 1))"))
    budget = _parse_budget(document["budget"]) if "budget" in document else None
    phases = document.get("phases")
    if phases is None or (isinstance(phases, list) and not phases):
        raise PlanError("phases", "at least one phase is required ([[phases]] tables)")
    if not isinstance(phases, list):
        raise PlanError("phases", f"must be an array of tables ([[phases]]), got {_show(phases)}")
    return Plan(delta=delta, phases=tuple(_parse_phase(i, t) for i, t in enumerate(phases)), budget_epsilon=budget)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def parse_plan(text: str, source: str = _DEFAULT_SOURCE) -> Plan:
    """Parse a plan from TOML ``text``; errors name ``source`` (unless it is the default)."""
    location = None if source == _DEFAULT_SOURCE else source
    if not isinstance(text, str):  # tomllib raises AttributeError for a dict or a number
        raise PlanError("", f"plan text must be a string (TOML), got {type(text).__name__}", location)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PlanError("", f"not valid TOML: {_one_line(error)}", location) from None
    except RecursionError:
        raise PlanError("", f"nested deeper than {MAX_NESTING} levels", location) from None
    try:
        check_nesting(document, "the plan")
    except InputFileError:
        raise PlanError("", f"nested deeper than {MAX_NESTING} levels", location) from None
    try:
        return _parse_document(document)
    except PlanError as error:
        raise error.located(location) if location else error from None


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """Read and parse the plan file at ``path`` (UTF-8 TOML, at most 16 MiB: read by
    :func:`dpforge.budget.inputs.read_text`, so a folder, ``/dev/zero`` or a binary file
    is one :class:`PlanError` line)."""
    source = os.fspath(path)
    try:
        text = read_text(source, "plan file")
    except UnreadableFileError as error:
        problem = "not valid TOML: the file is not UTF-8 text" if error.problem.endswith("not UTF-8 text") else error.problem
        raise PlanError("", problem, source) from None
    return parse_plan(text, source=source)


# the writer lives in its own module; plan_to_toml and write_plan stay importable from here
from dpforge.budget.plan_writer import plan_to_toml, write_plan  # noqa: E402


def __getattr__(name: str):
    """Names that moved in 0.2 (see :mod:`dpforge._deprecated`)."""
    return _deprecated.moved_name(__name__, name)
