"""Answers a user cannot misread (issue 13): no silent one-step defaults, the ``--lmo``
workload, accuracy stated or refused (exit 3), one JSON schema for every subcommand, a
conventional command line, strict input files."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpforge.cli.main import EXIT_ACCURACY, build_parser, main
from dpforge.cli.schema import validate

GAUSSIAN = ["--noise-multiplier", "1.1", "--sampling-rate", "0.01", "--steps", "100"]
PLAN = """
delta = 1e-5
[budget]
epsilon = 8.0
[[phases]]
noise = "gaussian"
noise_multiplier = 1.1
sampling_rate = 0.01
steps = 100
"""
#: a search result as ``dpforge lmo search --out`` writes it (numbers made up: only the
#: workload and the mechanism are read by ``--lmo``)
SAVED_Q, SAVED_T = 0.02, 50


def _search_result() -> dict:
    from dpforge.mechanisms import LMO

    return {
        "mechanism": LMO(weights=(0.5, 0.5, 0.0), gamma_shape=2.0, gamma_scale=1.5, exponential_rate=0.8).to_dict(),
        "epsilon": 1.0, "epsilon_lower": 0.99, "target_epsilon": 1.0, "delta": 1e-5,
        "sampling_rate": SAVED_Q, "steps": SAVED_T, "objective": "variance", "objective_value": 4.0,
        "std": 2.0, "mean_absolute": 1.5, "gaussian_noise_multiplier": 2.1, "gaussian_epsilon": 1.0,
        "gaussian_std": 2.1, "gaussian_abs": 1.67, "std_ratio": 0.95, "abs_ratio": 0.9,
        "components": ["gamma", "exponential"], "evaluations": 3, "epsilon_evaluations": 3, "seed": 0,
        "elapsed": 1.0, "stopped_early": False, "engine": "prv",
    }


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------- 1. no silent defaults


@pytest.mark.parametrize(
    "argv",
    [
        ["epsilon", "--noise-multiplier", "1.1", "--delta", "1e-5"],
        ["delta", "--noise-multiplier", "1.1", "--epsilon", "1"],
        ["calibrate", "--target-epsilon", "3", "--delta", "1e-5"],
        ["calibrate", "--target-epsilon", "3", "--delta", "1e-5", "--steps", "1000"],
        ["plot", "rdp", "--noise-multiplier", "1", "--out", "/tmp/never-written.png"],
    ],
)
def test_forgotten_workload_is_an_error_not_one_step(argv, run_error):
    line = run_error(*argv)
    assert "--sampling-rate is required" in line and "--sampling-rate 1 --steps 1" in line


def test_explicit_single_full_batch_step_still_works(run_json):
    data = run_json("calibrate", "--target-epsilon", "3", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "1")
    assert data["mechanism"] == [
        {"mechanism": "gaussian", "noise_multiplier": data["parameter_value"], "sensitivity": 1.0, "sampling_rate": 1.0, "steps": 1}
    ]


def test_lmo_file_supplies_its_saved_workload_and_says_so(tmp_path, capsys):
    saved = _write(tmp_path, "best.json", json.dumps(_search_result()))
    bare = _write(tmp_path, "bare.json", json.dumps(_search_result()["mechanism"]))
    assert main(["epsilon", "--lmo", saved, "--delta", "1e-5", "--json"]) == 0
    out, err = capsys.readouterr()
    from_file = json.loads(out)
    assert validate(from_file) == []
    assert from_file["workload_source"] == "file"
    assert (from_file["mechanism"][0]["sampling_rate"], from_file["mechanism"][0]["steps"]) == (SAVED_Q, SAVED_T)
    assert "saved in the file" in err and err.count("\n") == 1
    # the same numbers as giving the workload by hand for the bare mechanism
    workload = ["--sampling-rate", str(SAVED_Q), "--steps", str(SAVED_T)]
    assert main(["epsilon", "--lmo", bare, *workload, "--delta", "1e-5", "--json"]) == 0
    by_hand = json.loads(capsys.readouterr().out)
    assert by_hand["workload_source"] == "flags" and by_hand["epsilon_upper"] == from_file["epsilon_upper"]
    # a flag overrides the file, and the source says so
    assert main(["epsilon", "--lmo", saved, "--steps", "10", "--delta", "1e-5", "--json"]) == 0
    out, err = capsys.readouterr()
    mixed = json.loads(out)
    assert mixed["workload_source"] == "file+flags" and mixed["mechanism"][0]["steps"] == 10
    assert mixed["epsilon_upper"] < from_file["epsilon_upper"] and "10 steps (flag)" in err
    # a bare mechanism has no workload: the flags are required
    assert main(["epsilon", "--lmo", bare, "--delta", "1e-5"]) == 2
    assert "--sampling-rate is required" in capsys.readouterr().err


# --------------------------------------------------------------------------- 2. accuracy stated or refused


def _looser(result):
    """``result`` as if the engine had stopped at a bracket 40 % wide."""
    lower = 0.6 * result.upper
    accuracy = {**result.accuracy, "achieved": 0.4, "reached": False}
    return dataclasses.replace(result, lower=lower, accuracy=accuracy)


@pytest.fixture
def loose_engine(monkeypatch):
    import dpforge.accounting
    import dpforge.budget.verify

    real_epsilon, real_verify = dpforge.accounting.epsilon, dpforge.budget.verify.verify_plan

    def epsilon(*args, **kwargs):
        return _looser(real_epsilon(*args, **kwargs))

    def verify_plan(plan, **kwargs):
        report = real_verify(plan, **kwargs)
        return dataclasses.replace(report, epsilon_lower=0.6 * report.epsilon_upper)

    monkeypatch.setattr(dpforge.accounting, "epsilon", epsilon)
    monkeypatch.setattr(dpforge.budget.verify, "verify_plan", verify_plan)


def test_shortfall_exits_3_with_one_warning_line(loose_engine, capsys):
    assert main(["epsilon", *GAUSSIAN, "--delta", "1e-5", "--json"]) == EXIT_ACCURACY
    out, err = capsys.readouterr()
    data = json.loads(out)  # the certified result is still printed
    assert data["accuracy"] == {**data["accuracy"], "requested": 1e-3, "achieved": 0.4, "reached": False}
    (line,) = err.splitlines()
    assert line.startswith("dpforge: warning:") and "0.4 > --relative-accuracy 0.001" in line and "--accept-looser" in line
    assert main(["epsilon", *GAUSSIAN, "--delta", "1e-5", "--accept-looser"]) == 0
    out, err = capsys.readouterr()
    assert "accuracy achieved" in out and len(err.splitlines()) == 1 and "accepted" in err


def test_verify_never_passes_silently_on_a_looser_bound(loose_engine, tmp_path, capsys):
    plan = _write(tmp_path, "plan.toml", PLAN)
    assert main(["verify", plan]) == EXIT_ACCURACY
    out, err = capsys.readouterr()
    assert "WITHIN BUDGET" in out and "looser than asked" in err
    assert main(["verify", plan, "--accept-looser", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["accuracy"]["reached"] is False and "accepted" in err
    # over budget stays exit 1 whatever the accuracy
    assert main(["verify", plan, "--budget", "0.01"]) == 1
    capsys.readouterr()


def test_results_state_the_accuracy_they_reached():
    from dpforge.accounting import epsilon
    from dpforge.mechanisms import Composed, Gaussian, PoissonSampled

    description = Composed([(PoissonSampled(Gaussian(1.1), 0.01), 100)])
    prv = epsilon(description, 1e-5, relative_accuracy=1e-3).to_dict()
    assert prv["accuracy"]["requested"] == 1e-3 and prv["accuracy"]["reached"] is True
    assert prv["accuracy"]["achieved"] == pytest.approx((prv["epsilon_upper"] - prv["epsilon_lower"]) / prv["epsilon_upper"])
    rdp = epsilon(description, 1e-5, engine="rdp").to_dict()
    assert rdp["accuracy"]["requested"] is None and rdp["accuracy"]["reached"] is None


def test_exit_codes_are_documented():
    text = build_parser().format_help()
    for code in ("0  success", "1  verify", "2  usage", "3  accuracy shortfall"):
        assert code in text
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "--accept-looser" in readme and "| 3 |" in readme


# --------------------------------------------------------------------------- 3. one schema


def test_every_subcommand_json_follows_the_one_schema(tmp_path, run_json, monkeypatch, capsys):
    plan = _write(tmp_path, "plan.toml", PLAN)
    laplace = ["--noise", "laplace", "--scale", "2", "--sampling-rate", "0.01", "--steps", "100"]
    outputs = {
        "epsilon prv": run_json("epsilon", *GAUSSIAN, "--delta", "1e-5"),
        "epsilon rdp": run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "rdp"),
        "epsilon pure": run_json("epsilon", *laplace, "--delta", "1e-5", "--engine", "pure"),
        "epsilon montecarlo": run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "montecarlo", "--samples", "3000", "--seed", "1"),
        "epsilon plan": run_json("epsilon", "--plan", plan),
        "delta prv": run_json("delta", *GAUSSIAN, "--epsilon", "1"),
        "delta montecarlo": run_json("delta", *laplace, "--epsilon", "1", "--engine", "montecarlo", "--samples", "3000", "--seed", "1"),
        "calibrate gaussian": run_json("calibrate", "--target-epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "100"),
        "calibrate laplace": run_json("calibrate", "--noise", "laplace", "--target-epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "100"),
        "verify": run_json("verify", plan),
    }
    # lmo search: the search itself is tested elsewhere; here a stored result stands in for it
    import dpforge.design.search
    from dpforge.design import LMOSearchResult

    found = LMOSearchResult.from_dict(_search_result())
    monkeypatch.setattr(dpforge.design.search, "lmo_search", lambda *args, **kwargs: found)
    outputs["lmo search"] = run_json("lmo", "search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", str(SAVED_Q), "--steps", str(SAVED_T))
    for name, data in outputs.items():
        assert validate(data) == [], name
        assert data["schema_version"] == 1 and data["relation"] == "add-remove", name
        assert "estimate" not in data and "lower" not in data and "upper" not in data, name
    assert outputs["lmo search"]["search"] == found.to_dict()
    # the pure engine's lower bound is its certified single-step one, never above the upper
    pure = outputs["epsilon pure"]
    assert 0 < pure["epsilon_lower"] <= pure["epsilon_upper"]
    assert "epsilon_estimate" in outputs["epsilon montecarlo"] and "epsilon_estimate" not in outputs["epsilon prv"]


def test_schema_catches_departures():
    good = {
        "schema_version": 1, "dpforge_version": "0", "command": "epsilon", "engine": "prv", "relation": "add-remove",
        "sampling": "poisson", "mechanism": None, "delta": 1e-5, "epsilon_upper": 1.0, "epsilon_lower": 0.9,
        "accuracy": {"requested": 1e-3, "achieved": 1e-4, "reached": True}, "workload_source": "flags",
    }
    assert validate(good) == []
    assert validate({**good, "epsilon_lower": float("nan")}) != []
    assert validate({**good, "accuracy": {"requested": 1e-3}}) != []
    assert validate({key: value for key, value in good.items() if key != "delta"}) == ["delta: missing"]
    assert validate({**good, "command": "calibrate"}) != []


def test_result_objects_share_the_schema_and_write_no_nan():
    from dpforge.accounting.results import CalibrationResult
    from dpforge.cli.schema import command_object

    result = CalibrationResult(1.0, 2.0, 2.0, 1e-5, 1e-3, 4, "rdp", "noise_multiplier", float("nan"))
    data = result.to_dict()
    assert result.lower is None and data["epsilon_lower"] is None and data["accuracy"]["achieved"] is None
    assert "NaN" not in json.dumps(data)
    assert validate(command_object("calibrate", data)) == []


def test_readme_documents_the_json_schema():
    from dpforge.cli.schema import COMMON_FIELDS

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## JSON output", 1)[1].split("\n## ", 1)[0]
    example = json.loads(section.split("```json", 1)[1].split("```", 1)[0])
    assert validate(example) == []
    for name in COMMON_FIELDS:
        assert f"`{name}`" in section


# --------------------------------------------------------------------------- 4. a conventional command line


def test_version(capsys):
    from dpforge import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dpforge {__version__}"


@pytest.mark.parametrize(
    "argv, suggestion",
    [
        (["epsiln"], "did you mean 'epsilon'?"),
        (["calibrat", "--delta", "1e-5"], "did you mean 'calibrate'?"),
        (["plot", "profil"], "did you mean 'profile'?"),
        (["epsilon", "--noise-multiplyer", "1"], "did you mean '--noise-multiplier'?"),
        (["calibrate", "--target-epsilom", "1"], "did you mean '--target-epsilon'?"),
        (["verify", "plan.toml", "--budgett", "1"], "did you mean '--budget'?"),
    ],
)
def test_did_you_mean(argv, suggestion, run_error):
    assert run_error(*argv).endswith(f"({suggestion})")


def _commands(parser, prefix=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*prefix, name))
            return
    yield prefix, parser


def test_every_subcommand_help_has_a_description_and_an_example():
    commands = list(_commands(build_parser()))
    assert len(commands) >= 9
    for name, parser in commands:
        text = parser.format_help()
        assert parser.description, name
        assert "examples:" in text and "dpforge " in text.split("examples:", 1)[1], name


def test_help_and_usage_errors_import_nothing_heavy():
    commands = [" ".join(name) for name, _ in _commands(build_parser())]
    code = (
        "import sys, contextlib, io\n"
        "from dpforge.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    main(['--help']); main(['--version']); main(['epsiln']); main(['epsilon', '--noise-multiplyer', '1'])\n"
        f"    for command in {commands!r}:\n"
        "        main([*command.split(), '--help'])\n"
        "print(sorted(m for m in ('numpy', 'scipy', 'numba', 'matplotlib', 'torch') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_help_names_the_real_engines_and_components():
    from dpforge.accounting.api import engine_names
    from dpforge.cli.flags import BUILT_IN_ENGINES
    from dpforge.cli.lmo import COMPONENT_NAMES
    from dpforge.mechanisms.lmo import COMPONENTS

    assert BUILT_IN_ENGINES.split(", ") == list(engine_names())
    assert COMPONENT_NAMES.split(", ") == list(COMPONENTS)


# --------------------------------------------------------------------------- 5. strict input files


def _deep_toml(levels: int) -> str:
    return "delta = 1e-5\nx = " + "[" * levels + "]" * levels + "\n"


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda tmp: "/dev/zero", "larger than 16 MiB"),
        (lambda tmp: str(tmp), "it is a folder"),
        (lambda tmp: _write(tmp, "deep.toml", _deep_toml(5000)), "nested deeper"),
        (lambda tmp: _write(tmp, "deep2.toml", _deep_toml(40)), "nested deeper"),
        (lambda tmp: _write(tmp, "big.toml", "# " + "x" * (16 * 2**20) + "\n"), "larger than 16 MiB"),
        (lambda tmp: str(tmp / "absent.toml"), "cannot read"),
    ],
    ids=["dev-zero", "folder", "deep", "deep-40", "oversized", "absent"],
)
def test_unreadable_plans_are_one_line(make, fragment, tmp_path, run_error):
    path = make(tmp_path)
    for argv in (["verify", path], ["epsilon", "--plan", path]):
        assert fragment in run_error(*argv)


@pytest.mark.parametrize(
    "content, fragment",
    [
        ('{"mechanism": ' * 3000 + "1" + "}" * 3000, "nested deeper"),
        (json.dumps({"weights": [1, 0, 0]}), "gamma_shape: missing"),
        ('{"weights": [1, 0, 0], "weights": [0, 0, 1]}', "'weights' appears twice"),
        (json.dumps({**_search_result(), "mechanism": {**_search_result()["mechanism"], "weights": "100"}}), "weights: must be a list"),
        (json.dumps({key: value for key, value in _search_result().items() if key != "steps"}), "missing the field 'steps'"),
        (json.dumps({**_search_result(), "steps": "50"}), "'steps'"),
        (json.dumps({**_search_result(), "components": "gamma"}), "'components'"),
        (json.dumps({**_search_result(), "objective": 3}), "'objective'"),
        (json.dumps({**_search_result(), "stopped_early": "no"}), "'stopped_early'"),
        ('{"weights": NaN}', "NaN is not a JSON number"),
    ],
    ids=["deep", "missing-field", "duplicate-key", "weights-string", "missing-steps", "steps-string", "components-string",
         "objective-number", "flag-string", "nan-literal"],
)
def test_malformed_lmo_files_are_one_line(content, fragment, tmp_path, run_error):
    path = _write(tmp_path, "lmo.json", content)
    line = run_error("epsilon", "--lmo", path, "--sampling-rate", "1", "--steps", "1", "--delta", "1e-5")
    assert fragment in line and "lmo.json" in line


def test_lmo_file_from_dev_zero_and_a_folder(tmp_path, run_error):
    assert "larger than 16 MiB" in run_error("epsilon", "--lmo", "/dev/zero", "--delta", "1e-5")
    assert "it is a folder" in run_error("epsilon", "--lmo", str(tmp_path), "--delta", "1e-5")


def test_points_are_bounded(tmp_path, run_error):
    line = run_error("plot", "profile", *GAUSSIAN, "--points", "1e9", "--out", str(tmp_path / "p.png"))
    assert "--points must be an integer in [2, 10000], got 1e9" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--delta", "2"],
        ["epsilon", "--noise-multiplier", "-1", "--sampling-rate", "1", "--steps", "1", "--delta", "1e-5"],
        ["epsilon", "--noise-multiplier", "1", "--sampling-rate", "1.5", "--steps", "1", "--delta", "1e-5"],
        ["delta", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--epsilon", "-1"],
        ["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "2.5"],
        ["verify", "plan.toml", "--budget", "-1"],
        ["plot", "profile", "--noise-multiplier", "1", "--out", "x.foo"],
    ],
)
def test_bad_flag_values_are_answered_before_importing_the_engines(argv):
    code = (
        "import sys, contextlib, io\n"
        "from dpforge.cli.main import main\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        f"    code = main({argv!r})\n"
        "print(code, sorted(m for m in ('numpy', 'scipy', 'numba', 'dpforge.accounting') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "2 []", result.stderr


def test_figure_formats_are_supported_by_matplotlib():
    from matplotlib.backend_bases import FigureCanvasBase

    from dpforge.cli.plot import FIGURE_FORMATS

    assert set(FIGURE_FORMATS) <= set(FigureCanvasBase.get_supported_filetypes())


def test_real_engine_shortfall_is_exit_3(capsys):
    # a relative accuracy of 1e-6 is past what the PRV grid reaches here (about 4e-5)
    code = main(["epsilon", *GAUSSIAN, "--delta", "1e-5", "--relative-accuracy", "1e-6", "--json"])
    out, err = capsys.readouterr()
    accuracy = json.loads(out)["accuracy"]
    assert accuracy["requested"] == 1e-6
    if accuracy["reached"]:
        assert code == 0 and err == "" and accuracy["achieved"] <= 1e-6
    else:
        assert code == EXIT_ACCURACY and accuracy["achieved"] > 1e-6
        assert len(err.splitlines()) == 1 and "DpforgeAccuracyWarning" not in err  # the engine's warning is not repeated
