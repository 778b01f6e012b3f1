"""Budget: what a training run will do and what it did (row 3).

Plan files (:mod:`.plan`: parse, validate, write), their verification against a budget
(:mod:`.verify`) and the ledger of a run's private steps (:mod:`.ledger`), which writes the
plan ``dpforge verify`` checks.
"""

from dpforge.budget.ledger import Ledger, LedgerEntry
from dpforge.budget.plan import Phase, Plan, PlanError, load_plan, parse_plan, plan_to_toml, write_plan
from dpforge.budget.verify import PhaseCheck, VerifyReport, verify_plan

__all__ = [
    "Ledger",
    "LedgerEntry",
    "Phase",
    "PhaseCheck",
    "Plan",
    "PlanError",
    "VerifyReport",
    "load_plan",
    "parse_plan",
    "plan_to_toml",
    "verify_plan",
    "write_plan",
]
