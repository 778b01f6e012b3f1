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
