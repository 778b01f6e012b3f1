"""The ``dpforge`` command: JSON output, verify exit codes, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpforge.cli.main import main
from dpforge.cli.schema import validate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"

GAUSSIAN = ["--noise-multiplier", "1.1", "--sampling-rate", "0.01", "--steps", "100"]
LAPLACE = ["--noise", "laplace", "--scale", "2", "--sampling-rate", "0.01", "--steps", "50"]

PLAN_WITHIN = """
delta = 1e-5
[budget]
epsilon = 8.0
[[phases]]
name = "warmup"
noise = "gaussian"
noise_multiplier = 1.1
sampling_rate = 0.01
steps = 100
[[phases]]
noise = "laplace"
scale = 2.0
sampling_rate = 0.01
steps = 50
"""






def run_module(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpforge.cli.main", *argv], capture_output=True, text=True, timeout=120
    )


def write(tmp_path: Path, text: str, name: str = "plan.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------- results


@pytest.mark.parametrize("mechanism", [GAUSSIAN, LAPLACE], ids=["gaussian", "laplace"])
def test_epsilon_json(mechanism, run_json):
    data = run_json("epsilon", *mechanism, "--delta", "1e-5")
    assert validate(data) == []
    assert 0 < data["epsilon_lower"] <= data["epsilon_upper"]
    assert "estimate" not in data and "epsilon_estimate" not in data  # prv has no estimate of its own
    assert data["delta"] == 1e-5 and data["engine"] == "prv" and data["command"] == "epsilon"
    assert data["relation"] == "add-remove" and data["sampling"] == "poisson"
    assert data["accuracy"]["requested"] == 1e-3 and data["accuracy"]["achieved"] <= 1e-3
    (component,) = data["mechanism"]
    assert component["sampling_rate"] == 0.01 and component["steps"] == int(mechanism[-1])


def test_epsilon_human_table(capsys):
    assert main(["epsilon", *GAUSSIAN, "--delta", "1e-5"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    labels = [line.rsplit(None, 1)[0].strip() for line in out.splitlines()]
    for label in ("epsilon (certified upper)", "epsilon (certified lower)", "delta", "engine", "accuracy requested", "grid step"):
        assert label in labels
    assert "estimate" not in out
    assert any(line.split() == ["engine", "prv"] for line in out.splitlines())


@pytest.mark.parametrize(
    "argv, method",
    [
        (["--sampling-rate", "1", "--steps", "100", "--noise-multiplier", "2"], "closed form (gaussian composition), no grid"),
        (["--sampling-rate", "1e-6", "--steps", "1000", "--noise-multiplier", "0.3", "--delta", "0.1"], "total variation"),
    ],
)
def test_epsilon_table_names_a_method_without_a_grid(capsys, argv, method):
    """No "grid step None": a result read off a closed form or the total variation bound
    says how it was obtained."""
    delta = [] if "--delta" in argv else ["--delta", "1e-8"]
    assert main(["epsilon", *argv, *delta]) == 0
    out, _ = capsys.readouterr()
    (row,) = [line for line in out.splitlines() if line.startswith("method")]
    assert method in row and "None" not in out


def test_epsilon_of_a_plan_file_uses_the_plan_delta(tmp_path, run_json):
    plan = write(tmp_path, PLAN_WITHIN)
    data = run_json("epsilon", "--plan", plan)
    assert data["delta"] == 1e-5 and data["workload_source"] == "plan" and len(data["mechanism"]) == 2
    other = run_json("epsilon", "--plan", plan, "--delta", "1e-3")
    assert other["delta"] == 1e-3 and other["epsilon_upper"] < data["epsilon_upper"]


def test_delta_json(run_json):
    data = run_json("delta", *GAUSSIAN, "--epsilon", "0.5")
    assert validate(data) == []
    assert 0 <= data["delta_lower"] <= data["delta"] < 1
    assert data["epsilon_upper"] == 0.5 and data["epsilon_lower"] is None
    # epsilon = 0 is allowed (delta is then the total variation distance)
    assert run_json("delta", *LAPLACE, "--epsilon", "0")["delta"] > 0


def test_epsilon_and_delta_are_consistent(run_json):
    eps = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5")
    dlt = run_json("delta", *GAUSSIAN, "--epsilon", repr(eps["epsilon_upper"]))
    assert dlt["delta"] <= 1e-5 * 1.01


def test_calibrate_gaussian_json(run_json):
    data = run_json("calibrate", "--target-epsilon", "1.0", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "200")
    assert validate(data) == []
    assert data["parameter_name"] == "noise_multiplier" and data["parameter_value"] > 0
    assert data["target_epsilon"] * (1 - 2e-3) <= data["epsilon_upper"] <= data["target_epsilon"] == 1.0
    assert data["epsilon_lower"] is not None and data["epsilon_lower"] <= data["epsilon_upper"]
    assert data["mechanism"][0]["noise_multiplier"] == data["parameter_value"]
    check = run_json("epsilon", "--noise-multiplier", repr(data["parameter_value"]), "--sampling-rate", "0.01", "--steps", "200", "--delta", "1e-5")
    assert check["epsilon_lower"] <= 1.0


def test_calibrate_laplace_json(run_json):
    data = run_json("calibrate", "--noise", "laplace", "--target-epsilon", "1.0", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "50")
    assert validate(data) == []
    assert data["parameter_name"] == "scale" and "noise_multiplier" not in data
    assert data["parameter_value"] > 0 and data["epsilon_upper"] <= 1.0


def test_calibrate_human_table(capsys):
    assert main(["calibrate", "--target-epsilon", "2", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "10"]) == 0
    out, _ = capsys.readouterr()
    assert "noise_multiplier" in out and "epsilon (certified upper)" in out and "epsilon (certified lower)" in out


# --------------------------------------------------------------------------- verify


def test_verify_exit_codes_in_process(capsys, tmp_path, run_error):
    within = write(tmp_path, PLAN_WITHIN, "within.toml")
    assert main(["verify", within]) == 0
    out, err = capsys.readouterr()
    assert "warmup" in out and "phases[1]" in out and "WITHIN BUDGET" in out and err == ""

    over = write(tmp_path, PLAN_WITHIN.replace("epsilon = 8.0", "epsilon = 0.05"), "over.toml")
    assert main(["verify", "--plan", over]) == 1
    out, err = capsys.readouterr()
    assert "OVER BUDGET" in out and err == ""

    no_budget = write(tmp_path, PLAN_WITHIN.replace("[budget]\nepsilon = 8.0\n", ""), "free.toml")
    assert main(["verify", no_budget]) == 0
    capsys.readouterr()
    # --budget overrides the plan's budget
    assert main(["verify", within, "--budget", "0.05"]) == 1
    capsys.readouterr()
    assert main(["verify", over, "--budget", "100"]) == 0
    capsys.readouterr()

    invalid = write(tmp_path, PLAN_WITHIN.replace("steps = 50", "steps = 2.5"), "invalid.toml")
    message = run_error("verify", invalid)
    assert "invalid.toml" in message and "phases[1].steps" in message


def test_verify_json(capsys, tmp_path, run_json):
    within = write(tmp_path, PLAN_WITHIN)
    data = run_json("verify", within)
    assert validate(data) == []
    assert data["budget_epsilon"] == 8.0 and data["within_budget"] is True
    assert [phase["phase"] for phase in data["phases"]] == ["warmup", "phases[1]"]
    epsilons = [phase["epsilon_upper"] for phase in data["phases"]]
    assert epsilons == sorted(epsilons) and epsilons[-1] == data["epsilon_upper"]
    over = write(tmp_path, PLAN_WITHIN.replace("epsilon = 8.0", "epsilon = 0.05"), "over.toml")
    assert main(["verify", over, "--json"]) == 1
    out, _ = capsys.readouterr()
    assert json.loads(out)["within_budget"] is False


def test_verify_example_plans_through_the_module():
    within = run_module("verify", str(EXAMPLES / "within_budget.toml"))
    assert within.returncode == 0, within.stderr
    assert "WITHIN BUDGET" in within.stdout
    over = run_module("verify", str(EXAMPLES / "over_budget.toml"), "--json")
    assert over.returncode == 1, over.stderr
    assert json.loads(over.stdout)["within_budget"] is False


def test_errors_through_the_module_are_one_line_without_traceback(tmp_path):
    not_toml = write(tmp_path, "delta = = 1\n[[phases\n", "broken.toml")
    cases = [
        (["verify", not_toml], ["broken.toml", "not valid TOML"]),
        (["epsilon", "--noise-multiplier", "nan", "--delta", "1e-5"], ["--noise-multiplier", "finite"]),
        (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1.5", "--delta", "1e-5"], ["--sampling-rate must be in (0, 1], got 1.5"]),
        # a command module's error is the same class under ``python -m dpforge.cli.main``
        (["plot", "rdp", "--out", str(tmp_path / "x.png")], ["--noise-multiplier is required"]),
        (["lmo", "search", "--delta", "1e-5"], ["--target-epsilon is required"]),
    ]
    for argv, fragments in cases:
        result = run_module(*argv)
        assert result.returncode == 2, (argv, result.stderr)
        assert result.stdout == ""
        assert "Traceback" not in result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        for fragment in fragments:
            assert fragment in lines[0]


# --------------------------------------------------------------------------- bad input

BAD_FLAGS = [
    (["epsilon", "--noise-multiplier", "0", "--delta", "1e-5"], ["--noise-multiplier", "> 0"]),
    (["epsilon", "--noise-multiplier", "-1", "--delta", "1e-5"], ["--noise-multiplier", "> 0"]),
    (["epsilon", "--noise-multiplier", "nan", "--delta", "1e-5"], ["--noise-multiplier", "nan"]),
    (["epsilon", "--noise-multiplier", "inf", "--delta", "1e-5"], ["--noise-multiplier", "inf"]),
    (["epsilon", "--noise-multiplier", "-inf", "--delta", "1e-5"], ["--noise-multiplier"]),
    (["epsilon", "--noise-multiplier", "abc", "--delta", "1e-5"], ["--noise-multiplier must be a finite number > 0, got 'abc'"]),
    (["epsilon", "--noise", "laplace", "--scale", "0", "--delta", "1e-5"], ["--scale", "> 0"]),
    (["epsilon", "--noise", "laplace", "--scale", "-2", "--delta", "1e-5"], ["--scale", "> 0"]),
    (["epsilon", "--noise", "laplace", "--scale", "nan", "--delta", "1e-5"], ["--scale"]),
    (["epsilon", "--noise", "laplace", "--scale", "inf", "--delta", "1e-5"], ["--scale"]),
    (["epsilon", "--noise", "laplace", "--delta", "1e-5"], ["--scale is required"]),
    (["epsilon", "--delta", "1e-5"], ["--noise-multiplier is required"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--scale", "2", "--delta", "1e-5"], ["--scale", "laplace"]),
    (["epsilon", "--noise", "laplace", "--scale", "2", "--noise-multiplier", "1", "--delta", "1e-5"], ["--noise-multiplier", "gaussian"]),
    (["epsilon", "--noise", "cauchy", "--delta", "1e-5"], ["--noise", "cauchy", "gaussian", "laplace"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--sensitivity", "0", "--delta", "1e-5"], ["--sensitivity", "> 0"]),
    (["epsilon", "--noise-multiplier", "1", "--steps", "1", "--sampling-rate", "1.5", "--delta", "1e-5"], ["--sampling-rate must be in (0, 1], got 1.5"]),
    (["epsilon", "--noise-multiplier", "1", "--steps", "1", "--sampling-rate", "0", "--delta", "1e-5"], ["--sampling-rate", "(0, 1]"]),
    (["epsilon", "--noise-multiplier", "1", "--steps", "1", "--sampling-rate", "-0.5", "--delta", "1e-5"], ["--sampling-rate", "(0, 1]"]),
    (["epsilon", "--noise-multiplier", "1", "--steps", "1", "--sampling-rate", "nan", "--delta", "1e-5"], ["--sampling-rate"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "0", "--delta", "1e-5"], ["--steps", "integer >= 1"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "-3", "--delta", "1e-5"], ["--steps", "integer >= 1"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "2.5", "--delta", "1e-5"], ["--steps", "integer >= 1", "2.5"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "ten", "--delta", "1e-5"], ["--steps"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1"], ["--delta is required", "(0, 1)"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "0"], ["--delta", "(0, 1)"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "1"], ["--delta", "(0, 1)"]),
    # inside the interval but subnormal (5e-324 divided by zero in the engine); counts past 2**53
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "5e-324"], ["--delta must be in (0, 1) and at least 2.2250738585072014e-308, got 5e-324"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1e-320", "--steps", "1", "--delta", "1e-5"], ["--sampling-rate", "at least 2.2250738585072014e-308"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1e300", "--delta", "1e-5"], ["--steps must be an integer >= 1 and at most 2**53, got 1e300"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "1.5"], ["--delta", "(0, 1)"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "-1e-5"], ["--delta", "(0, 1)"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "nan"], ["--delta"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "1e-5", "--relative-accuracy", "0"], ["--relative-accuracy"]),
    (["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "1e-5", "--relative-accuracy", "2"], ["--relative-accuracy", "(0, 1)"]),
    (["delta", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1"], ["--epsilon is required", ">= 0"]),
    (["delta", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--epsilon", "-1"], ["--epsilon", ">= 0"]),
    (["delta", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--epsilon", "inf"], ["--epsilon", "finite"]),
    (["delta", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--epsilon", "nan"], ["--epsilon"]),
    (["calibrate", "--delta", "1e-5"], ["--target-epsilon is required"]),
    (["calibrate", "--target-epsilon", "1"], ["--delta is required"]),
    (["calibrate", "--target-epsilon", "0", "--delta", "1e-5"], ["--target-epsilon", "> 0"]),
    (["calibrate", "--target-epsilon", "-1", "--delta", "1e-5"], ["--target-epsilon", "> 0"]),
    (["calibrate", "--target-epsilon", "nan", "--delta", "1e-5"], ["--target-epsilon"]),
    (["calibrate", "--target-epsilon", "1", "--delta", "2"], ["--delta", "(0, 1)"]),
    (["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1.5"], ["--sampling-rate", "(0, 1]"]),
    (["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "2.5"], ["--steps", "integer >= 1"]),
    (["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--noise-multiplier", "1"], ["unrecognized arguments", "--noise-multiplier"]),
    (["calibrate", "--target-epsilon", "1e-6", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "10"], ["target_epsilon", "not reachable", "noise_multiplier"]),
    (["epsilon", "--noise-multiplier", "1.1", "--delta", "1e-5"], ["--sampling-rate is required", "--sampling-rate 1 --steps 1"]),
    (["epsilon", "--noise-multiplier", "1.1", "--sampling-rate", "0.01", "--delta", "1e-5"], ["--steps is required"]),
    (["delta", "--noise-multiplier", "1.1", "--epsilon", "1"], ["--sampling-rate is required"]),
    (["calibrate", "--target-epsilon", "3", "--delta", "1e-5"], ["--sampling-rate is required"]),
    (["calibrate", "--target-epsilon", "3", "--delta", "1e-5", "--sampling-rate", "0.01"], ["--steps is required"]),
    (["lmo", "search", "--target-epsilon", "1", "--delta", "1e-5"], ["--sampling-rate is required"]),
    (["epsilon", *["--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1"], "--delta", "1e-5", "--engine", "rdp", "--relative-accuracy", "0.01"], ["--relative-accuracy applies only to --engine prv"]),
    (["verify"], ["plan file is required"]),
    ([], ["required"]),
    (["frobnicate"], ["frobnicate"]),
]


@pytest.mark.parametrize("argv, fragments", BAD_FLAGS, ids=[" ".join(argv) for argv, _ in BAD_FLAGS])
def test_bad_flags_are_one_line_errors_with_exit_code_2(argv, fragments, run_error):
    message = run_error(*argv)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


BAD_PLANS = [
    ("not toml [[[", ["not valid TOML"]),
    (PLAN_WITHIN.replace("noise_multiplier = 1.1", "noise_multipler = 1.1"), ["phases[0]", "unknown key 'noise_multipler'"]),
    (PLAN_WITHIN.replace("delta = 1e-5", "delta = 1e-5\nseed = 1"), ["unknown top-level key 'seed'"]),
    (PLAN_WITHIN.replace("delta = 1e-5", ""), ["delta: missing"]),
    (PLAN_WITHIN.replace("delta = 1e-5", "delta = 2"), ["delta", "(0, 1)"]),
    (PLAN_WITHIN.replace("noise_multiplier = 1.1", 'noise_multiplier = "1.1"'), ["phases[0].noise_multiplier", "number"]),
    (PLAN_WITHIN.replace("noise_multiplier = 1.1", "noise_multiplier = -1"), ["phases[0].noise_multiplier", "> 0"]),
    (PLAN_WITHIN.replace("steps = 100", "steps = 10.5"), ["phases[0].steps", "integer"]),
    (PLAN_WITHIN.replace('noise = "laplace"', 'noise = "cauchy"'), ["phases[1].noise", '"cauchy"']),
    (PLAN_WITHIN.replace("sampling_rate = 0.01\nsteps = 50", "sampling_rate = 1.5\nsteps = 50"), ["phases[1].sampling_rate", "(0, 1]"]),
    (PLAN_WITHIN.replace("scale = 2.0", "scale = 2.0\nnoise_multiplier = 1.0"), ["phases[1]", "'noise_multiplier'"]),
    (PLAN_WITHIN.replace("epsilon = 8.0", "epsilon = -8.0"), ["budget.epsilon", ">= 0"]),
    ("delta = 1e-5\n[budget]\nepsilon = 1.0\n", ["phases", "at least one phase is required"]),
    ("delta = 1e-5\nphases = []\n", ["phases", "at least one phase is required"]),
]


@pytest.mark.parametrize("text, fragments", BAD_PLANS, ids=[str(i) for i in range(len(BAD_PLANS))])
def test_invalid_plans_exit_2_for_verify_and_epsilon(tmp_path, text, fragments, run_error):
    plan = write(tmp_path, text)
    for argv in (["verify", plan], ["verify", "--plan", plan, "--json"], ["epsilon", "--plan", plan], ["delta", "--plan", plan, "--epsilon", "1"]):
        message = run_error(*argv)
        assert "plan.toml" in message
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"


def test_plan_problems_outside_the_file(tmp_path, run_error):
    assert "cannot read" in run_error("verify", str(tmp_path / "absent.toml"))
    plan = write(tmp_path, PLAN_WITHIN)
    assert "--plan cannot be combined with --steps" in run_error("epsilon", "--plan", plan, "--steps", "3")
    assert "--budget" in run_error("verify", plan, "--budget", "-1")
    assert "once" in run_error("verify", plan, "--plan", str(tmp_path / "other.toml"))


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "verify" in capsys.readouterr().out
    assert main(["verify", "--help"]) == 0
    capsys.readouterr()


def test_help_imports_no_engine_plot_or_search():
    code = (
        "import sys\n"
        "from dpforge.cli.main import build_parser\n"
        "build_parser().format_help()\n"
        "print(sorted(m for m in ('scipy', 'numba', 'matplotlib', 'dpforge.accounting', 'dpforge.design') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_engine_choices_are_the_registry(run_error):
    from dpforge.accounting.api import engine_names

    message = run_error("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "magic")
    assert "invalid choice: 'magic'" in message
    for name in engine_names():
        assert repr(name) in message


def test_errors_are_decided_by_type_not_text(monkeypatch, run_error):
    import dpforge.accounting
    from dpforge.cli.flags import CliError
    from dpforge.errors import CalibrationError, DpforgeError, InputFileError

    assert issubclass(CliError, DpforgeError)
    argv = ["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "1"]

    def raising(error):
        def calibrate(*args, **kwargs):
            raise error
        return calibrate

    # a CalibrationError is reported as it is, whatever its text
    monkeypatch.setattr(dpforge.accounting, "calibrate_noise_multiplier", raising(CalibrationError("no sigma in [1, 2]")))
    assert run_error(*argv) == "dpforge: error: no sigma in [1, 2]"
    # any other error of the library is named as a failed calibration
    monkeypatch.setattr(dpforge.accounting, "calibrate_noise_multiplier", raising(OverflowError("math range error")))
    message = run_error(*argv)
    assert message.startswith("dpforge: error: cannot calibrate gaussian noise") and message.endswith("math range error")
    # every DpforgeError and OSError is one line with exit code 2
    argv = ["epsilon", *GAUSSIAN, "--delta", "1e-5"]
    monkeypatch.setattr(dpforge.accounting, "epsilon", raising(InputFileError("a\nb")))
    assert run_error(*argv) == "dpforge: error: a b"
    monkeypatch.setattr(dpforge.accounting, "epsilon", raising(FileNotFoundError(2, "No such file", "x.toml")))
    assert run_error(*argv) == "dpforge: error: x.toml: No such file"
