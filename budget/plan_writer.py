"""Writing plan files: TOML text that :func:`dpforge.budget.plan.parse_plan` reads back exactly."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from dpforge.budget.integrity import seal_plan_text
from dpforge.files import atomic_write_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    from dpforge.budget.plan import Plan

def _toml_string(text: str) -> str:
    """A TOML basic string (control characters and DEL escaped)."""
    escapes = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_float(value: float) -> str:
    """``repr`` of a finite float is a valid TOML float that reads back exactly."""
    return repr(float(value))


def _toml_value(value: Any) -> str:
    """A shape field as TOML: string, integer, float or array of floats."""
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_float(v) for v in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _toml_float(value)


def plan_to_toml(plan: Plan, *, seal: bool = True) -> str:
    """The plan as TOML text; ``parse_plan(plan_to_toml(plan)) == plan``.

    Sealed by default (:mod:`dpforge.budget.integrity`): a first comment line with the
    totals and a last one with the SHA-256, which ``dpforge verify`` checks.
    """
    lines = ["# dpforge training plan", f"delta = {_toml_float(plan.delta)}"]
    if plan.budget_epsilon is not None:
        lines += ["", "[budget]", f"epsilon = {_toml_float(plan.budget_epsilon)}"]
    for phase in plan.phases:
        lines += ["", "[[phases]]"]
        if phase.name is not None:
            lines.append(f"name = {_toml_string(phase.name)}")
        lines.append(f"noise = {_toml_string(phase.noise)}")
        if phase.parameter_name is not None:
            lines.append(f"{phase.parameter_name} = {_toml_float(phase.parameter)}")
        for key, value in phase.shape:
            lines.append(f"{key} = {_toml_value(value)}")
        if phase.sampling_scheme == "poisson":
            lines.append(f"sampling_rate = {_toml_float(phase.sampling_rate)}")
        else:  # a fixed-size phase: its rate is batch_size/dataset_size, stated by them
            lines += [
                f"sampling_scheme = {_toml_string(phase.sampling_scheme)}",
                f"batch_size = {int(phase.batch_size)}",
                f"dataset_size = {int(phase.dataset_size)}",
            ]
        lines.append(f"steps = {int(phase.steps)}")
        if phase.relation != "add-remove":
            lines.append(f"relation = {_toml_string(phase.relation)}")
        if phase.noise != "pure":
            lines.append(f"sensitivity = {_toml_float(phase.sensitivity)}")
    body = "\n".join(lines) + "\n"
    return seal_plan_text(body, plan) if seal else body


def write_plan(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write ``plan`` as sealed TOML (UTF-8) to ``path`` atomically (:mod:`dpforge.files`):
    a crash leaves the old file or the new one, never an empty or partial plan, and a
    file damaged later is refused by ``dpforge verify`` (:mod:`dpforge.budget.integrity`)."""
    atomic_write_text(path, plan_to_toml(plan))
