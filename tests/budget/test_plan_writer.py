"""Written plans keep the question: sampling scheme, batch and dataset sizes, relation."""

from __future__ import annotations

import pytest

from dpforge.budget.plan import Phase, Plan, parse_plan
from dpforge.budget.plan_writer import plan_to_toml


@pytest.mark.parametrize(
    "scheme, relation, sizes, rate, steps",
    [
        ("without-replacement", "replace-one", {"batch_size": 256, "dataset_size": 60_000}, 1.0, 100),
        ("without-replacement", "add-remove", {"batch_size": 256, "dataset_size": 60_000}, 1.0, 100),
        ("shuffled", "add-remove", {"batch_size": 250, "dataset_size": 1_000}, 1.0, 8),
        ("poisson", "replace-one", {}, 0.01, 100),
        ("poisson", "add-remove", {}, 0.01, 100),
    ],
)
def test_a_written_plan_reads_back_as_the_same_question(scheme, relation, sizes, rate, steps):
    phase = Phase(
        noise="gaussian", parameter=1.0, sampling_rate=rate, steps=steps, sampling_scheme=scheme, relation=relation, **sizes
    )
    plan = Plan(phases=(phase,), delta=1e-5)
    again = parse_plan(plan_to_toml(plan))
    assert again == plan
    assert again.description() == plan.description()


def test_verify_reports_the_plans_relation_and_sampling():
    from dpforge.budget.verify import verify_plan

    phase = Phase(
        noise="gaussian", parameter=1.0, steps=100, sampling_scheme="without-replacement",
        batch_size=256, dataset_size=60_000, relation="replace-one",
    )
    report = verify_plan(Plan(phases=(phase,), delta=1e-5, budget_epsilon=100.0)).to_dict()
    assert (report["relation"], report["sampling"]) == ("replace-one", "without-replacement")
