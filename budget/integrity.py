"""Integrity of machine-written plans: their totals up front, a checksum at the end.

A plan written by dpforge (:func:`~dpforge.budget.plan_writer.write_plan`,
``Ledger.to_plan``) is *sealed*: its first line states the totals and its last line the
SHA-256 of everything before it (docs/design.md §7)::

    # dpforge-plan-integrity: v1 phases=3 steps=2600
    delta = 1e-05
    ...
    # dpforge-plan-sha256: 5f0c...e1

Both are TOML comments, so every TOML reader (and :func:`~dpforge.budget.plan.parse_plan`)
reads the plan as before.  :func:`check_plan_text` refuses a sealed plan whose checksum
line is missing (a truncated file: a cut anywhere after the first line loses it), whose
checksum differs (an edited or damaged file) or whose phases and steps differ from the
stated totals.  A cut inside the first line leaves only a comment, which is not a plan.
So no byte-prefix of a sealed plan is accepted as a plan with fewer phases or steps.
A plan without the first line (hand-written) is not checked.  To edit a sealed plan by
hand, delete its two ``dpforge-plan`` lines.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import TYPE_CHECKING

from dpforge.errors import InputFileError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from dpforge.budget.plan import Plan

__all__ = ["HEADER_PREFIX", "TRAILER_PREFIX", "check_plan_file", "check_plan_text", "load_checked_plan", "seal_plan_text"]

HEADER_PREFIX = "# dpforge-plan-integrity:"
TRAILER_PREFIX = "# dpforge-plan-sha256:"
_HEADER = re.compile(r"# dpforge-plan-integrity: v1 phases=(\d+) steps=(\d+)\n")
_TRAILER = re.compile(r"# dpforge-plan-sha256: ([0-9a-f]{64})\n")


def _totals(plan: "Plan") -> tuple[int, int]:
    return len(plan.phases), sum(int(phase.steps) for phase in plan.phases)


def seal_plan_text(body: str, plan: "Plan") -> str:
    """``body`` (TOML text ending in a newline) with the totals line before it and the
    checksum line after it."""
    phases, steps = _totals(plan)
    if not body.endswith("\n"):
        body += "\n"
    head = f"{HEADER_PREFIX} v1 phases={phases} steps={steps}\n" + body
    digest = hashlib.sha256(head.encode("utf-8")).hexdigest()
    return head + f"{TRAILER_PREFIX} {digest}\n"


def check_plan_text(text: str, plan: "Plan | None" = None, source: str | None = None) -> bool:
    """True for a sealed plan whose checksum and totals (against ``plan``, when given)
    match; False for an unsealed (hand-written) one; a one-line InputFileError naming
    ``source`` for a sealed plan that does not match."""
    where = f"{source}: " if source else ""
    if not text.startswith(HEADER_PREFIX):
        return False
    header = _HEADER.match(text)
    if header is None:
        raise InputFileError(f"{where}damaged dpforge-plan-integrity line (the file was cut or edited)")
    cut = text.rfind("\n", 0, len(text) - 1) + 1
    trailer = _TRAILER.fullmatch(text[cut:]) if text.endswith("\n") else None
    if trailer is None:
        raise InputFileError(
            f"{where}the plan was written by dpforge but its checksum line is missing: the file is truncated"
        )
    if hashlib.sha256(text[:cut].encode("utf-8")).hexdigest() != trailer.group(1):
        raise InputFileError(
            f"{where}checksum mismatch: the plan was changed after dpforge wrote it "
            "(delete its two dpforge-plan lines to use it as a hand-written plan)"
        )
    if plan is not None:
        stated = (int(header.group(1)), int(header.group(2)))
        if _totals(plan) != stated:
            raise InputFileError(
                f"{where}the plan has {_totals(plan)[0]} phases and {_totals(plan)[1]} steps but states "
                f"{stated[0]} phases and {stated[1]} steps"
            )
    return True


def check_plan_file(path: str | os.PathLike[str], plan: "Plan | None" = None) -> bool:
    """:func:`check_plan_text` on the file at ``path`` (read as UTF-8)."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            text = handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputFileError(f"{source}: cannot read plan file: {getattr(error, 'strerror', None) or error}") from None
    return check_plan_text(text, plan, source)


def load_checked_plan(path: str | os.PathLike[str]) -> "Plan":
    """:func:`~dpforge.budget.plan.load_plan`, then :func:`check_plan_file` (what
    ``dpforge verify`` reads plans with)."""
    from dpforge.budget.plan import load_plan

    plan = load_plan(path)
    check_plan_file(path, plan)
    return plan
