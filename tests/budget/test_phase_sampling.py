"""The sampling keys of plan phases: strict checks and the descriptions they stand for."""

import pytest

from dpforge.budget.phase_sampling import check_one_relation, check_phase_sampling, phase_description, plan_description
from dpforge.errors import InputFileError
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled, SampledWithoutReplacement, Shuffled, WithRelation


def test_fixed_size_phase_takes_its_rate_from_the_sizes():
    checked = check_phase_sampling("without-replacement", 256, 60000.0, "add-remove", 1.0, 10)
    assert checked["sampling_rate"] == 256 / 60000 and checked["dataset_size"] == 60000


@pytest.mark.parametrize(
    "args, field",
    [
        (("poisson", 10, None, "add-remove", 0.1, 5), "batch_size"),
        (("poisson", None, None, "sideways", 0.1, 5), "relation"),
        (("fixed", 10, 100, "add-remove", 1.0, 5), "sampling_scheme"),
        (("without-replacement", None, 100, "add-remove", 1.0, 5), "batch_size"),
        (("without-replacement", 10, 100.5, "add-remove", 1.0, 5), "dataset_size"),
        (("without-replacement", 200, 100, "add-remove", 1.0, 5), "batch_size"),
        (("without-replacement", 10, 100, "add-remove", 0.5, 5), "sampling_rate"),
        (("shuffled", 10, 100, "add-remove", 1.0, 15), "steps"),
        (("shuffled", True, 100, "add-remove", 1.0, 10), "batch_size"),
    ],
)
def test_phase_sampling_errors_name_the_field(args, field):
    with pytest.raises(InputFileError, match=f"^{field}: "):
        check_phase_sampling(*args)


def test_descriptions():
    g = Gaussian(1.0)
    assert phase_description(g, "poisson", 0.1, 5, None, None, "add-remove") == Composed([(PoissonSampled(g, 0.1), 5)])
    assert phase_description(g, "without-replacement", 0.1, 5, 10, 100, "replace-one") == WithRelation(
        Composed([(SampledWithoutReplacement(g, 10, 100), 5)])
    )
    assert phase_description(g, "shuffled", 0.1, 30, 10, 100, "add-remove") == Composed([(Shuffled(g, 10, 100), 3)])
    both = plan_description(
        [phase_description(g, "poisson", 0.1, 5, None, None, "replace-one"), phase_description(g, "poisson", 1.0, 2, None, None, "replace-one")],
        ["replace-one", "replace-one"],
    )
    assert both == WithRelation(Composed([(PoissonSampled(g, 0.1), 5), (g, 2)]))
    with pytest.raises(InputFileError, match=r"^phases\[1\]\.relation: .*one per run"):
        check_one_relation(["add-remove", "replace-one"])


PLAN = """
delta = 1e-5
[[phases]]
noise = "gaussian"
noise_multiplier = 1.0
sampling_scheme = "without-replacement"
batch_size = 100
dataset_size = 10000
steps = 50
relation = "replace-one"
[[phases]]
noise = "gaussian"
noise_multiplier = 2.0
sampling_rate = 0.01
steps = 10
relation = "replace-one"
"""


def test_plan_phases_with_sampling_keys():
    from dpforge.budget.plan import parse_plan

    plan = parse_plan(PLAN)
    assert plan.phases[0].sampling_rate == 0.01 and plan.phases[0].sampling_scheme == "without-replacement"
    assert plan.description() == WithRelation(
        Composed([(SampledWithoutReplacement(Gaussian(1.0), 100, 10000), 50), (PoissonSampled(Gaussian(2.0), 0.01), 10)])
    )
    assert plan.description(upto=1) == WithRelation(Composed([(SampledWithoutReplacement(Gaussian(1.0), 100, 10000), 50)]))


@pytest.mark.parametrize(
    "change, message",
    [
        (('relation = "replace-one"\n[[phases]]', '[[phases]]'), r"phases\[1\]\.relation: every phase must state the same relation"),
        (("batch_size = 100", "batch_size = 100.5"), r"phases\[0\]\.batch_size: must be an integer"),
        (('sampling_scheme = "without-replacement"', 'sampling_scheme = "fixed"'), r"phases\[0\]\.sampling_scheme"),
        (("steps = 10\n", "steps = 10\nbatch_size = 3\n"), r"phases\[1\]\.batch_size: only for a fixed-size phase"),
        (("dataset_size = 10000", "dataset_size = 10000\nsampling_rate = 0.5"), r"phases\[0\]\.sampling_rate"),
    ],
)
def test_plan_sampling_errors(change, message):
    from dpforge.budget.plan import PlanError, parse_plan

    old, new = change
    assert old in PLAN
    with pytest.raises(PlanError, match=message):
        parse_plan(PLAN.replace(old, new, 1))


def test_verify_takes_lower_bounds_from_realised_pairs():
    from dpforge.accounting import epsilon
    from dpforge.budget.plan import parse_plan
    from dpforge.budget.verify import verify_plan

    plan = parse_plan(PLAN)
    report = verify_plan(plan)
    direct = epsilon(plan.description(), plan.delta)
    assert report.epsilon_lower == pytest.approx(direct.lower, rel=1e-6)
    assert report.epsilon_lower < report.accuracy["pair_lower"] <= report.epsilon_upper
