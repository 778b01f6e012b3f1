"""Training plan files: parsing, validation messages, round-trip and budget verification."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from dpforge.accounting import epsilon
from dpforge.budget.plan import Phase, Plan, PlanError, load_plan, parse_plan, plan_to_toml, write_plan
from dpforge.budget.verify import verify_plan
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"

SMALL_PLAN = """
delta = 1e-5

[budget]
epsilon = 8.0

[[phases]]
name = "warmup"
noise = "gaussian"
noise_multiplier = 1.1
sampling_rate = 0.01
steps = 200

[[phases]]
noise = "laplace"
scale = 2.0
sampling_rate = 0.01
steps = 50
sensitivity = 0.5
"""


def small_plan(budget: float | None = 8.0) -> Plan:
    return Plan(
        delta=1e-5,
        phases=(
            Phase("gaussian", 1.1, sampling_rate=0.01, steps=200, name="warmup"),
            Phase("laplace", 2.0, sampling_rate=0.01, steps=50, sensitivity=0.5),
        ),
        budget_epsilon=budget,
    )


# --------------------------------------------------------------------------- parsing


def test_parse_small_plan_gives_the_documented_fields():
    plan = parse_plan(SMALL_PLAN)
    assert plan == small_plan()
    gaussian, laplace = plan.phases
    assert gaussian.mechanism() == Gaussian(1.1)
    assert laplace.mechanism() == Laplace(2.0, 0.5)
    assert gaussian.parameter_name == "noise_multiplier" and laplace.parameter_name == "scale"
    assert gaussian.label(0) == "warmup" and laplace.label(1) == "phases[1]"


def test_defaults_sampling_rate_and_sensitivity_and_optional_budget():
    plan = parse_plan('delta = 0.001\n[[phases]]\nnoise = "gaussian"\nnoise_multiplier = 2\nsteps = 10\n')
    (phase,) = plan.phases
    assert plan.budget_epsilon is None
    assert phase.sampling_rate == 1.0 and phase.sensitivity == 1.0 and phase.name is None
    assert isinstance(phase.parameter, float) and phase.parameter == 2.0
    assert phase.description() == Composed([(Gaussian(2.0), 10)])


def test_integral_float_steps_are_accepted():
    plan = parse_plan('delta = 1e-5\n[[phases]]\nnoise = "laplace"\nscale = 1.0\nsteps = 10.0\n')
    assert plan.phases[0].steps == 10 and isinstance(plan.phases[0].steps, int)


def test_phase_description_subsamples_only_below_rate_one():
    phase = Phase("gaussian", 1.1, sampling_rate=0.01, steps=7)
    assert phase.description() == Composed([(PoissonSampled(Gaussian(1.1), 0.01), 7)])
    assert Phase("laplace", 3.0, steps=2).description() == Composed([(Laplace(3.0), 2)])


def test_plan_description_composes_prefixes():
    plan = small_plan()
    first = plan.description(upto=1)
    assert first == Composed([(PoissonSampled(Gaussian(1.1), 0.01), 200)])
    whole = plan.description()
    assert whole.parts == first.parts + plan.phases[1].description().parts
    assert plan.description(upto=2) == whole
    for bad in (0, 3, 1.5, True):
        with pytest.raises(ValueError, match="upto"):
            plan.description(upto=bad)


def test_example_plans_parse():
    for name in ("within_budget.toml", "over_budget.toml"):
        plan = load_plan(EXAMPLES / name)
        assert plan.budget_epsilon is not None and len(plan.phases) >= 2


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize(
    "plan",
    [
        small_plan(),
        small_plan(budget=None),
        small_plan(budget=0.0),
        Plan(
            delta=3.3e-7,
            phases=(
                Phase("gaussian", 0.1 + 0.2, sampling_rate=1 / 3, steps=12345, sensitivity=1e-3, name='q"uo\\te\n\tx\x7f'),
                Phase("laplace", 1e16, steps=1, name="ünïcødé 🙂"),
                Phase("gaussian", 5e-324, sampling_rate=1.0, steps=2, name=""),
            ),
            budget_epsilon=1 / 7,
        ),
    ],
)
def test_round_trip_through_toml(plan, tmp_path):
    assert parse_plan(plan_to_toml(plan)) == plan
    path = tmp_path / "plan.toml"
    write_plan(plan, path)
    assert load_plan(path) == plan
    assert load_plan(str(path)) == plan


def test_round_trip_of_example_files():
    for name in ("within_budget.toml", "over_budget.toml"):
        plan = load_plan(EXAMPLES / name)
        assert parse_plan(plan_to_toml(plan)) == plan


# --------------------------------------------------------------------------- invalid plans

GAUSSIAN = 'noise = "gaussian"\nnoise_multiplier = 1.0\nsteps = 10\n'


def with_phases(*phases: str, head: str = "delta = 1e-5\n") -> str:
    return head + "".join(f"[[phases]]\n{body}" for body in phases)


INVALID = [
    # (TOML text, substrings the one-line message must contain)
    ("delta = 1e-5\n", ["phases", "at least one phase is required"]),
    ("delta = 1e-5\nphases = []\n", ["phases", "at least one phase is required"]),
    ('delta = 1e-5\nphases = "many"\n', ["phases", "array of tables"]),
    ("delta = 1e-5\nphases = [1, 2]\n", ["phases[0]", "must be a table"]),
    (with_phases(GAUSSIAN, head=""), ["delta: missing"]),
    (with_phases(GAUSSIAN, head="delta = 0\n"), ["delta: must be a number in (0, 1), got 0"]),
    (with_phases(GAUSSIAN, head="delta = 1.0\n"), ["delta", "(0, 1)", "1.0"]),
    (with_phases(GAUSSIAN, head='delta = "1e-5"\n'), ["delta", "number", '"1e-5"']),
    (with_phases(GAUSSIAN, head="delta = true\n"), ["delta", "number", "true"]),
    (with_phases(GAUSSIAN, head="delta = nan\n"), ["delta", "finite"]),
    (with_phases(GAUSSIAN, head="delta = 1e-5\nseed = 3\n"), ["unknown top-level key 'seed'", "allowed: delta, budget, phases"]),
    (with_phases(GAUSSIAN, head="deltta = 1e-5\n"), ["unknown top-level key 'deltta'", "did you mean 'delta'"]),
    (with_phases(GAUSSIAN, head="delta = 1e-5\n[budget]\nepsilon = -1\n"), ["budget.epsilon", ">= 0", "-1"]),
    (with_phases(GAUSSIAN, head="delta = 1e-5\n[budget]\nepsilon = inf\n"), ["budget.epsilon", "finite"]),
    (with_phases(GAUSSIAN, head='delta = 1e-5\n[budget]\nepsilon = "8"\n'), ["budget.epsilon", "number"]),
    (with_phases(GAUSSIAN, head="delta = 1e-5\n[budget]\n"), ["budget.epsilon: missing"]),
    (with_phases(GAUSSIAN, head="delta = 1e-5\n[budget]\nepsilon = 1\ndelta = 2\n"), ["budget", "unknown key 'delta'"]),
    (with_phases(GAUSSIAN, head="delta = 1e-5\nbudget = 8\n"), ["budget", "must be a table"]),
    (with_phases('noise_multiplier = 1.0\nsteps = 10\n'), ["phases[0].noise: missing"]),
    (
        with_phases(GAUSSIAN, GAUSSIAN, 'noise = "cauchy"\nsteps = 1\n'),
        ['phases[2].noise: must be "gaussian", "laplace", "pure" or "lmo", got "cauchy"'],
    ),
    (with_phases('noise = 3\nsteps = 1\n'), ["phases[0].noise", "got 3"]),
    (with_phases('noise = ["gaussian"]\nsteps = 1\n'), ["phases[0].noise", "an array"]),
    (
        with_phases(GAUSSIAN, 'noise = "gaussian"\nnoise_multiplier = -1\nsteps = 10\n'),
        ["phases[1].noise_multiplier: must be a number > 0, got -1"],
    ),
    (with_phases('noise = "gaussian"\nnoise_multiplier = 0\nsteps = 10\n'), ["phases[0].noise_multiplier", "> 0"]),
    (with_phases('noise = "gaussian"\nnoise_multiplier = nan\nsteps = 10\n'), ["phases[0].noise_multiplier", "nan"]),
    (with_phases('noise = "gaussian"\nnoise_multiplier = inf\nsteps = 10\n'), ["phases[0].noise_multiplier", "inf"]),
    (with_phases('noise = "gaussian"\nnoise_multiplier = "1.1"\nsteps = 10\n'), ["phases[0].noise_multiplier", '"1.1"']),
    (with_phases('noise = "gaussian"\nnoise_multiplier = true\nsteps = 10\n'), ["phases[0].noise_multiplier", "true"]),
    (with_phases('noise = "gaussian"\nsteps = 10\n'), ["phases[0].noise_multiplier: missing"]),
    (with_phases('noise = "laplace"\nsteps = 10\n'), ["phases[0].scale: missing"]),
    (with_phases('noise = "laplace"\nscale = -2\nsteps = 10\n'), ["phases[0].scale", "> 0", "-2"]),
    (
        with_phases('noise = "gaussian"\nnoise_multipler = 1.0\nsteps = 10\n'),
        ["phases[0]: unknown key 'noise_multipler'", "did you mean 'noise_multiplier'"],
    ),
    (with_phases(GAUSSIAN + "learning_rate = 0.1\n"), ["phases[0]", "unknown key 'learning_rate'"]),
    (with_phases(GAUSSIAN + "scale = 2.0\n"), ["phases[0]", "'scale'", "gaussian"]),
    (with_phases('noise = "laplace"\nscale = 1.0\nnoise_multiplier = 1.0\nsteps = 3\n'), ["phases[0]", "'noise_multiplier'", "laplace"]),
    (with_phases('noise = "gaussian"\nnoise_multiplier = 1.0\n'), ["phases[0].steps: missing"]),
    (with_phases('noise = "gaussian"\nnoise_multiplier = 1.0\nsteps = 10.5\n'), ["phases[0].steps", "integer >= 1", "10.5"]),
    (with_phases('noise = "gaussian"\nnoise_multiplier = 1.0\nsteps = 0\n'), ["phases[0].steps", "integer >= 1", "0"]),
    (with_phases('noise = "gaussian"\nnoise_multiplier = 1.0\nsteps = "10"\n'), ["phases[0].steps", '"10"']),
    (with_phases('noise = "gaussian"\nnoise_multiplier = 1.0\nsteps = true\n'), ["phases[0].steps", "true"]),
    (with_phases(GAUSSIAN + "sampling_rate = 1.5\n"), ["phases[0].sampling_rate", "(0, 1]", "1.5"]),
    (with_phases(GAUSSIAN + "sampling_rate = 0\n"), ["phases[0].sampling_rate", "(0, 1]"]),
    (with_phases(GAUSSIAN + "sampling_rate = -0.1\n"), ["phases[0].sampling_rate", "(0, 1]"]),
    (with_phases(GAUSSIAN + "sensitivity = 0\n"), ["phases[0].sensitivity", "> 0"]),
    (with_phases(GAUSSIAN + "name = 5\n"), ["phases[0].name", "string"]),
    ("delta = \n", ["not valid TOML"]),
    ("this is not toml at all", ["not valid TOML"]),
    ('delta = 1e-5\n[[phases]]\nnoise = "gaussian"\nnoise = "laplace"\n', ["not valid TOML"]),
    # a dict or a number reached tomllib and came back as an AttributeError
    ({"delta": 1e-5, "phases": []}, ["plan text must be a string", "dict"]),
    (5, ["plan text must be a string", "int"]),
    (b"delta = 1e-5", ["plan text must be a string", "bytes"]),
]


@pytest.mark.parametrize("text, expected", INVALID, ids=[str(i) for i in range(len(INVALID))])
def test_invalid_plan_is_one_line_naming_the_field(text, expected):
    with pytest.raises(PlanError) as caught:
        parse_plan(text)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert isinstance(caught.value, ValueError)


def test_errors_from_files_name_the_file(tmp_path):
    broken = tmp_path / "plan.toml"
    broken.write_text("delta = = 3\n")
    with pytest.raises(PlanError, match=r"^.*plan\.toml: not valid TOML: "):
        load_plan(broken)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(with_phases('noise = "gaussian"\nnoise_multiplier = -1\nsteps = 10\n'))
    with pytest.raises(PlanError, match=r"wrong\.toml: phases\[0\]\.noise_multiplier: must be a number > 0"):
        load_plan(wrong)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PlanError, match="binary.toml: not valid TOML"):
        load_plan(binary)
    with pytest.raises(PlanError, match="missing.toml: cannot read"):
        load_plan(tmp_path / "missing.toml")
    with pytest.raises(PlanError, match=r"^my-source: delta: missing"):
        parse_plan(with_phases(GAUSSIAN, head=""), source="my-source")


def test_plan_error_fields_and_pickling():
    with pytest.raises(PlanError) as caught:
        parse_plan(with_phases(GAUSSIAN + "sampling_rate = 2\n"))
    error = caught.value
    assert error.field == "phases[0].sampling_rate"
    assert "(0, 1]" in error.problem
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_constructing_invalid_objects_directly_raises():
    with pytest.raises(PlanError, match="noise_multiplier: must be a number > 0"):
        Phase("gaussian", -1.0, steps=1)
    with pytest.raises(PlanError, match="scale: must be a finite number > 0"):
        Phase("laplace", float("inf"), steps=1)
    with pytest.raises(PlanError, match='noise: must be "gaussian", "laplace", "pure" or "lmo"'):
        Phase("cauchy", 1.0)
    with pytest.raises(PlanError, match="steps: must be an integer >= 1"):
        Phase("gaussian", 1.0, steps=2.5)
    with pytest.raises(PlanError, match="phases: at least one phase is required"):
        Plan(delta=1e-5, phases=())
    with pytest.raises(PlanError, match="delta: must be a number in"):
        Plan(delta=0.0, phases=(Phase("gaussian", 1.0),))
    with pytest.raises(PlanError, match="budget.epsilon"):
        Plan(delta=1e-5, phases=(Phase("gaussian", 1.0),), budget_epsilon=-1.0)


# --------------------------------------------------------------------------- verification


def test_verify_within_budget_and_cumulative_epsilon_is_non_decreasing():
    plan = small_plan(budget=8.0)
    report = verify_plan(plan)
    assert report.within_budget is True
    assert [check.label for check in report.phases] == ["warmup", "phases[1]"]
    assert [check.steps for check in report.phases] == [200, 50]
    uppers = [check.epsilon_upper for check in report.phases]
    lowers = [check.epsilon_lower for check in report.phases]
    assert all(a <= b for a, b in zip(uppers, uppers[1:]))
    assert all(a <= b for a, b in zip(lowers, lowers[1:]))
    assert all(low <= high for low, high in zip(lowers, uppers))
    assert report.epsilon_upper == uppers[-1] == report.epsilon
    direct = epsilon(plan.description(), plan.delta)
    assert report.epsilon_upper >= direct.upper
    assert report.epsilon_upper == pytest.approx(direct.upper, rel=2e-3)
    # row 0 comes from the prefix-product composition at the whole plan's grid: a different
    # certified bracket from a fresh epsilon() of the prefix, so the two must overlap and agree
    first = epsilon(plan.description(upto=1), plan.delta)
    assert lowers[0] <= first.upper and first.lower <= uppers[0]
    assert uppers[0] == pytest.approx(first.upper, rel=2e-3)
    data = report.to_dict()
    assert data["epsilon_upper"] == report.epsilon_upper and data["budget_epsilon"] == 8.0 and data["within_budget"] is True
    assert len(data["phases"]) == 2


def test_verify_over_budget_and_without_budget():
    over = verify_plan(small_plan(budget=0.1))
    assert over.within_budget is False and over.epsilon_upper > 0.1
    free = verify_plan(small_plan(budget=None))
    assert free.within_budget is None and free.budget_epsilon is None


def test_verify_example_plans():
    within = verify_plan(load_plan(EXAMPLES / "within_budget.toml"))
    over = verify_plan(load_plan(EXAMPLES / "over_budget.toml"))
    assert within.within_budget is True
    assert over.within_budget is False
    for report in (within, over):
        uppers = [check.epsilon_upper for check in report.phases]
        assert uppers == sorted(uppers)
