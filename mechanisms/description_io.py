"""Strict serialisation of whole descriptions (sampling combinators, compositions, the
relation), on top of the mechanism form of :mod:`dpforge.mechanisms.serialize`::

    Gaussian(1.0)                               {"mechanism": "gaussian", "noise_multiplier": 1.0, "sensitivity": 1.0}
    PoissonSampled(m, q)                        {"sampling": "poisson", "sampling_rate": q, "of": m}
    SampledWithoutReplacement(m, B, n)          {"sampling": "without-replacement", "batch_size": B, "dataset_size": n, "of": m}
    Shuffled(m, B, n)                           {"sampling": "shuffled", "batch_size": B, "dataset_size": n, "of": m}
    Composed([(d, c), ...])                     {"composed": [{"count": c, "of": d}, ...]}
    WithRelation(d, r)                          {"relation": r, "of": d}

Reading is strict: unknown keys, missing keys and wrong types are one
:class:`~dpforge.errors.InputFileError` line naming the key; ranges are then checked by the
constructors (their errors are re-raised as InputFileError).
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping

from dpforge.errors import DpforgeError, InputFileError
from dpforge.mechanisms.base import Mechanism
from dpforge.mechanisms.combinators import Composed, Description, PoissonSampled
from dpforge.mechanisms.sampling import SampledWithoutReplacement, Shuffled, WithRelation
from dpforge.mechanisms.serialize import mechanism_from_dict, mechanism_to_dict

_SAMPLING_KEYS = {
    "poisson": ("sampling_rate",),
    "without-replacement": ("batch_size", "dataset_size"),
    "shuffled": ("batch_size", "dataset_size"),
}


def description_to_dict(description: Description) -> dict[str, Any]:
    """The JSON-ready form of ``description`` (module docstring)."""
    if isinstance(description, WithRelation):
        return {"relation": description.relation, "of": description_to_dict(description.description)}
    if isinstance(description, Composed):
        return {"composed": [{"count": int(count), "of": description_to_dict(part)} for part, count in description.parts]}
    if isinstance(description, PoissonSampled):
        return {"sampling": "poisson", "sampling_rate": float(description.sampling_rate), "of": description_to_dict(description.mechanism)}
    if isinstance(description, (SampledWithoutReplacement, Shuffled)):
        kind = "without-replacement" if isinstance(description, SampledWithoutReplacement) else "shuffled"
        return {
            "sampling": kind,
            "batch_size": int(description.batch_size),
            "dataset_size": int(description.dataset_size),
            "of": description_to_dict(description.mechanism),
        }
    if isinstance(description, Mechanism):
        return mechanism_to_dict(description)
    raise InputFileError(f"a {type(description).__name__} cannot be written as a description")


def _keys(data: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> None:
    for key in data:
        if key not in allowed:
            raise InputFileError(f"{key}: not a key of {what} (allowed: {', '.join(allowed)})")
    for key in allowed:
        if key not in data:
            raise InputFileError(f"{key}: missing (a {what} needs {', '.join(allowed)})")


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputFileError(f"{name}: must be an integer, got {value!r}")
    return int(value)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputFileError(f"{name}: must be a number, got {value!r}")
    return float(value)


def description_from_dict(data: Any) -> Description:
    """The description a :func:`description_to_dict` dict describes (strict)."""
    if not isinstance(data, Mapping):
        raise InputFileError(f"a description must be an object, got {data!r}")
    try:
        if "mechanism" in data:
            return mechanism_from_dict(data)
        if "relation" in data:
            _keys(data, ("relation", "of"), "relation wrapper")
            return WithRelation(description_from_dict(data["of"]), data["relation"])
        if "composed" in data:
            _keys(data, ("composed",), "composition")
            parts = data["composed"]
            if not isinstance(parts, list) or not parts:
                raise InputFileError("composed: must be a non-empty list of {count, of} objects")
            out = []
            for index, item in enumerate(parts):
                if not isinstance(item, Mapping):
                    raise InputFileError(f"composed[{index}]: must be an object with count and of")
                _keys(item, ("count", "of"), f"composed[{index}]")
                out.append((description_from_dict(item["of"]), _integer(f"composed[{index}].count", item["count"])))
            return Composed(out)
        if "sampling" in data:
            kind = data["sampling"]
            if kind not in _SAMPLING_KEYS:
                raise InputFileError(f"sampling: must be one of {', '.join(_SAMPLING_KEYS)}, got {kind!r}")
            _keys(data, ("sampling", *_SAMPLING_KEYS[kind], "of"), f"{kind} sampling")
            inner = description_from_dict(data["of"])
            if kind == "poisson":
                return PoissonSampled(inner, _number("sampling_rate", data["sampling_rate"]))
            cls = SampledWithoutReplacement if kind == "without-replacement" else Shuffled
            return cls(inner, _integer("batch_size", data["batch_size"]), _integer("dataset_size", data["dataset_size"]))
    except InputFileError:
        raise
    except DpforgeError as error:
        raise InputFileError(str(error)) from None
    raise InputFileError("a description needs one of the keys mechanism, sampling, composed, relation")


def description_components(description: Description) -> list[dict[str, Any]]:
    """The components of ``description`` as flat records for result files (the CLI's
    ``mechanism`` list): the mechanism's serialisation, ``sampling_rate`` and ``steps``,
    plus ``sampling_scheme``, ``batch_size`` and ``dataset_size`` for fixed-size and
    shuffled steps (a shuffled epoch counts ceil(n/B) steps).  Equal components merge,
    in order of first use; the relation is the result's own field, not repeated here.
    Unlike :func:`~dpforge.mechanisms.combinators.flatten`, mechanisms are written as
    described (not as the pairs the engines account)."""
    from dpforge.mechanisms.sampling import unwrap

    merged: dict[tuple, int] = {}
    records: dict[tuple, dict[str, Any]] = {}

    def visit(node: Any, times: int) -> None:
        if isinstance(node, Composed):
            for part, count in node.parts:
                visit(part, times * count)
            return
        if isinstance(node, PoissonSampled):
            mechanism, rate = node.base()
            record, steps = {**mechanism_to_dict(mechanism), "sampling_rate": rate}, times
        elif isinstance(node, (SampledWithoutReplacement, Shuffled)):
            shuffled = isinstance(node, Shuffled)
            record = {
                **mechanism_to_dict(node.mechanism),
                "sampling_rate": node.sampling_rate,
                "sampling_scheme": "shuffled" if shuffled else "without-replacement",
                "batch_size": node.batch_size,
                "dataset_size": node.dataset_size,
            }
            steps = times * (node.steps if shuffled else 1)
        elif isinstance(node, Mechanism):
            record, steps = {**mechanism_to_dict(node), "sampling_rate": 1.0}, times
        else:
            raise InputFileError(f"a {type(node).__name__} cannot be written as a component")
        key = tuple(sorted((name, tuple(value) if isinstance(value, list) else value) for name, value in record.items()))
        if key not in merged:
            merged[key] = 0
            records[key] = record
        merged[key] += steps

    visit(unwrap(description)[0], 1)
    return [{**records[key], "steps": count} for key, count in merged.items()]
