"""``--relation``, ``--sampling-scheme``, ``--batch-size``, ``--dataset-size`` and plan
files with sampling keys, on the command line."""

import pytest

from dpforge.accounting import epsilon
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled, SampledWithoutReplacement, WithRelation

FIXED = ("--noise-multiplier", "1.0", "--sampling-scheme", "without-replacement", "--batch-size", "10",
         "--dataset-size", "1000", "--steps", "50", "--delta", "1e-5")


def test_fixed_size_batches_and_relation(run_json):
    data = run_json("epsilon", *FIXED, "--relation", "replace-one")
    expected = epsilon(WithRelation(Composed([(SampledWithoutReplacement(Gaussian(1.0), 10, 1000), 50)])), 1e-5)
    assert data["relation"] == "replace-one" and data["sampling"] == "without-replacement"
    assert data["epsilon_upper"] == pytest.approx(expected.upper, rel=1e-12)
    (component,) = data["mechanism"]
    assert component["sampling_rate"] == 0.01 and component["batch_size"] == 10 and component["dataset_size"] == 1000


def test_replace_one_poisson(run_json):
    data = run_json("epsilon", "--noise-multiplier", "1.0", "--sampling-rate", "0.01", "--steps", "100",
                    "--delta", "1e-5", "--relation", "replace-one")
    expected = epsilon(WithRelation(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 100)])), 1e-5)
    assert data["relation"] == "replace-one" and data["epsilon_upper"] == pytest.approx(expected.upper, rel=1e-12)
    default = run_json("epsilon", "--noise-multiplier", "1.0", "--sampling-rate", "0.01", "--steps", "100", "--delta", "1e-5")
    assert default["relation"] == "add-remove" and default["epsilon_upper"] < data["epsilon_lower"]


@pytest.mark.parametrize(
    "argv, message",
    [
        ((*FIXED, "--sampling-rate", "0.01"), "--sampling-rate cannot be combined with --sampling-scheme"),
        (("--noise-multiplier", "1", "--sampling-rate", "0.1", "--batch-size", "2", "--steps", "3", "--delta", "1e-5"),
         "--batch-size applies only to --sampling-scheme without-replacement"),
        (("--noise-multiplier", "1", "--sampling-scheme", "without-replacement", "--batch-size", "2", "--steps", "3",
          "--delta", "1e-5"), "--dataset-size is required"),
        (("--noise-multiplier", "1", "--sampling-scheme", "without-replacement", "--batch-size", "30",
          "--dataset-size", "20", "--steps", "3", "--delta", "1e-5"), "--batch-size must be at most --dataset-size"),
        ((*FIXED, "--relation", "swap"), "--relation"),
        (("--plan", "plan.toml", "--relation", "replace-one", "--delta", "1e-5"), "--plan cannot be combined with --relation"),
    ],
)
def test_errors_are_one_line(run_error, argv, message):
    assert message in run_error("epsilon", *argv)


def test_plan_with_sampling_keys(run_json, tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'delta = 1e-5\n[budget]\nepsilon = 100.0\n[[phases]]\nnoise = "gaussian"\nnoise_multiplier = 1.0\n'
        'sampling_scheme = "without-replacement"\nbatch_size = 10\ndataset_size = 1000\nsteps = 50\nrelation = "replace-one"\n'
    )
    data = run_json("epsilon", "--plan", str(plan))
    assert data["relation"] == "replace-one" and data["sampling"] == "without-replacement"
