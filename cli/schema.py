"""The one JSON schema of every ``dpforge ... --json`` object, written once, and its check.

Every subcommand that prints JSON (``epsilon``, ``delta``, ``calibrate``, ``verify``,
``lmo search``) prints one object with the fields of :data:`COMMON_FIELDS` (the names
of :mod:`dpforge.accounting.results`, plus ``command``), and the fields of its own in
:data:`COMMAND_FIELDS`.  A value is of one of the listed JSON types; ``null`` is allowed
only where ``None`` is listed, and never stands for a number that was computed.  No NaN
anywhere.  :func:`validate` checks an object against this and returns the problems (an
empty list when it conforms); the command-line tests run it on every subcommand.

``mechanism`` is the accounted description as a list of its flattened components, each
the one mechanism serialisation (:func:`dpforge.mechanisms.serialize.mechanism_to_dict`)
plus ``sampling_rate`` and ``steps`` (:func:`description_to_list`).

No dependency: the schema is a dict of field name -> allowed Python types of the decoded
JSON value.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpforge.mechanisms.combinators import Description

_NUMBER = (int, float)
_NULL = type(None)

#: field -> allowed types (after ``json.loads``); every JSON object has all of them
COMMON_FIELDS: dict[str, tuple[type, ...]] = {
    "schema_version": (int,),
    "dpforge_version": (str,),
    "command": (str,),
    "engine": (str,),
    "relation": (str,),
    "sampling": (str, _NULL),
    "mechanism": (list, _NULL),
    "delta": _NUMBER,
    "epsilon_upper": (*_NUMBER, str),  # "inf" where nothing finite could be certified
    "epsilon_lower": (*_NUMBER, _NULL),
    "accuracy": (dict,),
}
#: the fields every ``accuracy`` object has
ACCURACY_FIELDS: dict[str, tuple[type, ...]] = {
    "requested": (*_NUMBER, _NULL),
    "achieved": (*_NUMBER, _NULL),
    "reached": (bool, _NULL),
}
#: each command's own fields (required; ``montecarlo`` adds :data:`MONTECARLO_FIELDS`)
COMMAND_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "epsilon": {"workload_source": (str,)},
    "delta": {"delta_lower": _NUMBER, "workload_source": (str,)},
    "calibrate": {
        "target_epsilon": _NUMBER,
        "parameter_name": (str,),
        "parameter_value": _NUMBER,
        "evaluations": (int,),
    },
    "verify": {
        "plan": (str,),
        "budget_epsilon": (*_NUMBER, _NULL),
        "within_budget": (bool, _NULL),
        "rows": (str,),
        "phases": (list,),
    },
    "lmo search": {"target_epsilon": _NUMBER, "search": (dict,)},
}
#: the Monte-Carlo engine's extra fields (its bounds hold with probability ``confidence``)
MONTECARLO_FIELDS: dict[str, tuple[type, ...]] = {
    "samples": (int,),
    "confidence": _NUMBER,
    "bound": (str,),
    "seed": (int, _NULL),
}
#: the fields of each ``verify`` phase row
PHASE_FIELDS: dict[str, tuple[type, ...]] = {
    "phase": (str,),
    "steps": (int,),
    "epsilon_upper": (*_NUMBER, str),
    "epsilon_lower": (*_NUMBER, _NULL),
    "reached": (bool,),
}


def _type_problems(where: str, data: dict[str, Any], fields: dict[str, tuple[type, ...]]) -> list[str]:
    problems = []
    for name, allowed in fields.items():
        if name not in data:
            problems.append(f"{where}{name}: missing")
            continue
        value = data[name]
        if isinstance(value, bool) and bool not in allowed:
            problems.append(f"{where}{name}: must not be a boolean, got {value!r}")
        elif not isinstance(value, allowed):
            names = ", ".join("null" if t is _NULL else t.__name__ for t in allowed)
            problems.append(f"{where}{name}: must be one of {names}, got {value!r}")
    return problems


def _nan_problems(where: str, value: Any) -> list[str]:
    if isinstance(value, float) and math.isnan(value):
        return [f"{where}: NaN"]
    if isinstance(value, str) and value.lower() == "nan":
        return [f"{where}: 'nan'"]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _nan_problems(f"{where}.{key}", item)]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _nan_problems(f"{where}[{index}]", item)]
    return []


def validate(data: Any) -> list[str]:
    """The ways ``data`` (one decoded ``--json`` object) departs from the schema; empty
    when it conforms."""
    if not isinstance(data, dict):
        return [f"must be a JSON object, got {type(data).__name__}"]
    problems = _type_problems("", data, COMMON_FIELDS)
    command = data.get("command")
    if isinstance(command, str):
        if command not in COMMAND_FIELDS:
            problems.append(f"command: unknown command {command!r}")
        else:
            problems += _type_problems("", data, COMMAND_FIELDS[command])
    if data.get("engine") == "montecarlo":
        problems += _type_problems("", data, MONTECARLO_FIELDS)
    if isinstance(data.get("accuracy"), dict):
        problems += _type_problems("accuracy.", data["accuracy"], ACCURACY_FIELDS)
    for index, phase in enumerate(data.get("phases") or ()):
        if not isinstance(phase, dict):
            problems.append(f"phases[{index}]: must be an object")
        else:
            problems += _type_problems(f"phases[{index}].", phase, PHASE_FIELDS)
    for index, component in enumerate(data.get("mechanism") or ()):
        if not isinstance(component, dict) or not {"mechanism", "sampling_rate", "steps"} <= set(component):
            problems.append(f"mechanism[{index}]: must be an object with mechanism, sampling_rate and steps")
    return problems + _nan_problems("", data)


def description_to_list(description: Description) -> list[dict[str, Any]]:
    """The schema's ``mechanism``: each component as the one mechanism serialisation
    plus its ``sampling_rate`` and ``steps`` (and, for fixed-size or shuffled batches,
    ``sampling_scheme``, ``batch_size``, ``dataset_size``), equal components merged
    (:func:`dpforge.mechanisms.description_io.description_components`)."""
    from dpforge.mechanisms.description_io import description_components

    return description_components(description)


def command_object(command: str, result: dict[str, Any], description: Description | None = None, **extra: Any) -> dict[str, Any]:
    """One ``--json`` object: a result's :meth:`to_dict` with ``command`` first, the
    accounted ``description`` as ``mechanism``, and the command's ``extra`` fields."""
    data = {"command": command, **result}
    if description is not None:
        data["mechanism"] = description_to_list(description)
    data.update(extra)
    return data
