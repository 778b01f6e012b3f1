"""The sampling keys of a plan phase: ``sampling_scheme``, ``batch_size``, ``dataset_size``
and ``relation``, checked strictly, and the description a phase and a plan stand for.

A phase is Poisson-sampled at ``sampling_rate`` unless it says otherwise::

    [[phases]]
    noise = "gaussian"
    noise_multiplier = 1.0
    sampling_scheme = "without-replacement"   # or "shuffled"; default "poisson"
    batch_size = 256                          # fixed-size schemes only: the rate is
    dataset_size = 60000                      #   batch_size / dataset_size (no sampling_rate)
    steps = 2350                              # shuffled: whole epochs of ceil(n/B) steps
    relation = "replace-one"                  # default "add-remove"; the same in every phase

A shuffled phase is accounted by a certified lower bound only
(:mod:`dpforge.accounting.shuffled`), so a budget check of it never passes on a
Poisson number.  The relation is one per plan, because a description has one
(:class:`dpforge.mechanisms.WithRelation`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from dpforge.errors import InputFileError
from dpforge.mechanisms import Composed, Mechanism, PoissonSampled, SampledWithoutReplacement, Shuffled, WithRelation
from dpforge.mechanisms.sampling import RELATIONS, SCHEMES, unwrap

#: the phase keys this module reads
PHASE_SAMPLING_KEYS = ("sampling_scheme", "batch_size", "dataset_size", "relation")


def sampling_keys(table: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling keys present in a phase table (values unchecked: the phase checks them)."""
    return {key: table[key] for key in PHASE_SAMPLING_KEYS if key in table}


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _whole(name: str, value: Any) -> int:
    """An integer >= 1 (an integral float such as 256.0 is accepted, 256.5 is not)."""
    problem = f"{name}: must be an integer >= 1, got {_show(value)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputFileError(problem)
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise InputFileError(problem)
    if int(value) < 1:
        raise InputFileError(problem)
    return int(value)


def check_phase_sampling(
    scheme: Any, batch_size: Any, dataset_size: Any, relation: Any, sampling_rate: float, steps: int
) -> dict[str, Any]:
    """The checked, normalised sampling fields of a phase (``sampling_rate`` included: a
    fixed-size scheme's rate is batch_size/dataset_size).  Problems are one
    :class:`~dpforge.errors.InputFileError` line ``field: problem``."""
    if scheme not in SCHEMES:
        raise InputFileError(f"sampling_scheme: must be one of {', '.join(_show(s) for s in SCHEMES)}, got {_show(scheme)}")
    if relation not in RELATIONS:
        raise InputFileError(f"relation: must be one of {', '.join(_show(r) for r in RELATIONS)}, got {_show(relation)}")
    if scheme == "poisson":
        for name, value in (("batch_size", batch_size), ("dataset_size", dataset_size)):
            if value is not None:
                raise InputFileError(
                    f"{name}: only for a fixed-size phase (sampling_scheme \"without-replacement\" or \"shuffled\"); "
                    "a Poisson phase states sampling_rate"
                )
        return {"sampling_scheme": scheme, "batch_size": None, "dataset_size": None, "relation": relation}
    for name, value in (("batch_size", batch_size), ("dataset_size", dataset_size)):
        if value is None:
            raise InputFileError(f"{name}: missing (a {scheme} phase needs batch_size and dataset_size)")
    batch, size = _whole("batch_size", batch_size), _whole("dataset_size", dataset_size)
    if batch > size:
        raise InputFileError(f"batch_size: must be at most dataset_size ({size}), got {batch}")
    rate = batch / size
    if not (sampling_rate == 1.0 or abs(sampling_rate - rate) <= 1e-12 * rate):
        raise InputFileError(
            f"sampling_rate: a {scheme} phase's rate is batch_size/dataset_size = {rate:g}; leave sampling_rate out"
        )
    if scheme == "shuffled":
        per_epoch = math.ceil(size / batch)
        if steps % per_epoch:
            raise InputFileError(
                f"steps: a shuffled phase runs whole epochs of ceil(dataset_size/batch_size) = {per_epoch} steps, got {steps}"
            )
    return {"sampling_scheme": scheme, "batch_size": batch, "dataset_size": size, "relation": relation, "sampling_rate": rate}


def phase_description(
    mechanism: Mechanism,
    scheme: str,
    sampling_rate: float,
    steps: int,
    batch_size: int | None,
    dataset_size: int | None,
    relation: str,
) -> Any:
    """The description of one checked phase (wrapped in ``WithRelation`` under replace-one)."""
    if scheme == "without-replacement":
        description = Composed([(SampledWithoutReplacement(mechanism, int(batch_size), int(dataset_size)), steps)])
    elif scheme == "shuffled":
        epoch = Shuffled(mechanism, int(batch_size), int(dataset_size))
        description = Composed([(epoch, steps // epoch.steps)])
    else:
        step = PoissonSampled(mechanism, sampling_rate) if sampling_rate < 1.0 else mechanism
        description = Composed([(step, steps)])
    return description if relation == "add-remove" else WithRelation(description, relation)


def check_one_relation(relations: Sequence[str]) -> None:
    """Every phase must state the same relation (one per run)."""
    for index, relation in enumerate(relations):
        if relation != relations[0]:
            raise InputFileError(
                f"phases[{index}].relation: every phase must state the same relation (one per run), "
                f"got {_show(relation)} after {_show(relations[0])}"
            )


def plan_description(descriptions: Sequence[Any], relations: Sequence[str]) -> Any:
    """The composition of the phases' descriptions under their one relation."""
    check_one_relation(relations)
    parts = [part for description in descriptions for part in unwrap(description)[0].parts]
    composed = Composed(parts)
    return composed if relations[0] == "add-remove" else WithRelation(composed, relations[0])
