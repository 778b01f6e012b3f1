"""dpforge.plots and ``dpforge plot``: the figures draw what the engines certify."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from dpforge import plots  # noqa: E402
from dpforge.budget import Phase, Plan
from dpforge.accounting import delta, epsilon  # noqa: E402
from dpforge.accounting.profiles import delta_profile  # noqa: E402
from dpforge.accounting.rdp import rdp_curve  # noqa: E402
from dpforge.cli.main import main  # noqa: E402
from dpforge.mechanisms import LMO, Composed, Gaussian, Laplace, PoissonSampled, PureDP  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DP_SGD = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 300)])


def _line(ax, label_start: str):
    (line,) = [line for line in ax.lines if str(line.get_label()).startswith(label_start)]
    return np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)


# ----------------------------------------------------------------- delta_profile


def test_delta_profile_brackets_agree_with_delta():
    grid = np.array([0.2, 0.8, 1.5, 2.5])
    lower, upper = delta_profile(DP_SGD, grid)
    assert (lower <= upper).all() and (upper > 0).all()
    assert np.all(np.diff(upper) < 0), "delta(epsilon) decreases"
    for k, value in enumerate(grid):
        single = delta(DP_SGD, float(value))
        # both brackets are certified, so they must overlap, and both are tight
        assert lower[k] <= single.upper and single.lower <= upper[k]
        # as tight as the single query (which may stop short of 1e-3 at tiny deltas)
        assert (upper[k] - lower[k]) / upper[k] <= max(1e-3, single.accuracy["achieved"]) * (1 + 1e-9)


@pytest.mark.parametrize("bad", [[], [np.nan], [-1.0], [[0.1, 0.2]]])
def test_delta_profile_rejects_bad_epsilons(bad):
    with pytest.raises(ValueError, match="epsilons"):
        delta_profile(DP_SGD, bad)


# ----------------------------------------------------------------- figures


def test_privacy_profile_draws_each_engine():
    laplace = Composed([(PoissonSampled(Laplace(1.0), 0.05), 100)])
    grid = np.linspace(0.3, 2.0, 6)
    ax = plots.plot_privacy_profile(laplace, engines=("prv", "rdp", "pure"), epsilons=grid)
    _, prv_upper = _line(ax, "PRV")
    _, rdp_upper = _line(ax, "RDP")
    _, pure_upper = _line(ax, "pure")
    expected_lower, expected_upper = delta_profile(laplace, grid)
    assert (pure_upper >= expected_lower).all()
    assert np.allclose(prv_upper, expected_upper, rtol=1e-12)
    assert (rdp_upper >= expected_lower).all(), "RDP's certified upper bound lies above PRV's certified lower"
    assert ax.get_yscale() == "log"
    # one band: PRV's (the pure engine's loose lower bound is not drawn as a band)
    assert len(ax.collections) == 1


def test_privacy_profile_default_grid_spans_useful_deltas():
    ax = plots.plot_privacy_profile(DP_SGD, engines=("prv",), points=5)
    x, y = _line(ax, "PRV")
    assert len(x) == 5 and y[-1] == pytest.approx(1e-9, rel=0.05)
    assert y[0] > 1e-3


def test_epsilon_vs_steps_of_a_plan():
    plan = Plan(
        delta=1e-5,
        phases=(Phase("gaussian", 1.2, 0.01, 200), Phase("laplace", 2.0, 0.01, 100)),
        budget_epsilon=2.0,
    )
    ax = plots.plot_epsilon_vs_steps(plan, engines=("prv", "rdp"), points=8)
    steps, upper = _line(ax, "PRV")
    assert steps[0] == 1 and steps[-1] == 300 and np.all(np.diff(steps) > 0)
    assert np.all(np.diff(upper) > 0), "epsilon grows with the steps"
    assert upper[-1] == pytest.approx(epsilon(plan.description(), 1e-5).upper, rel=1e-9)
    _, rdp_upper = _line(ax, "RDP")
    assert (rdp_upper >= upper * (1 - 2e-3)).all()
    budget = [line for line in ax.lines if "budget" in str(line.get_label())]
    assert len(budget) == 1 and budget[0].get_ydata()[0] == 2.0


def test_a_zero_budget_is_drawn():
    plan = Plan(delta=1e-5, phases=(Phase("gaussian", 1.2, 0.01, 20),), budget_epsilon=0.0)
    ax = plots.plot_epsilon_vs_steps(plan, points=3)
    (budget,) = [line for line in ax.lines if "budget" in str(line.get_label())]
    assert budget.get_ydata()[0] == 0.0


def test_epsilon_vs_steps_of_one_step():
    step = PoissonSampled(Laplace(2.0), 0.01)
    ax = plots.plot_epsilon_vs_steps(step, steps=50, delta=1e-5, engines=("pure",), points=4)
    steps, upper = _line(ax, "pure")
    assert steps[-1] == 50
    assert upper[-1] == pytest.approx(epsilon(Composed([(step, 50)]), 1e-5, engine="pure").upper)
    with pytest.raises(ValueError, match="steps is required"):
        plots.plot_epsilon_vs_steps(step, delta=1e-5)
    with pytest.raises(ValueError, match="delta is required"):
        plots.plot_epsilon_vs_steps(step, steps=5)


@pytest.mark.parametrize(
    "mechanism",
    [Gaussian(1.3), Gaussian(0.5, sensitivity=2.0), Laplace(0.7), LMO(weights=(1, 0, 0), gamma_shape=3.0, gamma_scale=1.0)],
)
def test_noise_density_integrates_to_one(mechanism):
    x = np.linspace(-200, 200, 400_001)
    density = plots.noise_density(mechanism, x)
    assert np.all(density >= 0)
    assert np.trapezoid(density, x) == pytest.approx(1.0, abs=2e-3)


def test_noise_densities_figure_and_heavy_tails():
    lmo = LMO(weights=(0, 1, 0), exponential_rate=1.0)  # infinite variance: the tail sets the width
    ax = plots.plot_noise_densities({"gauss": Gaussian(1.0), "lap": Laplace(1.0), "lmo": lmo})
    x, y = _line(ax, "gauss")
    assert x[-1] > 6.0 and ax.get_yscale() == "log"
    assert "std inf" in [str(line.get_label()) for line in ax.lines][2]
    with pytest.raises(ValueError, match="mechanisms"):
        plots.plot_noise_densities({"rr": PureDP(1.0)})
    with pytest.raises(ValueError, match="mechanisms"):
        plots.plot_noise_densities({})


def test_rdp_curves_figure():
    laplace = Composed([(PoissonSampled(Laplace(2.0), 0.01), 100)])
    ax = plots.plot_rdp_curves({"dp-sgd": DP_SGD, "laplace": laplace})
    orders, values = _line(ax, "laplace")
    curve = rdp_curve(laplace)
    assert np.allclose(values, curve.values[np.isin(curve.orders, orders)])
    assert np.all(np.diff(values) >= -1e-12), "the curve is non-decreasing in the order"


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: plots.plot_privacy_profile(DP_SGD, engines=("fast",)), "engines"),
        (lambda: plots.plot_privacy_profile(DP_SGD, engines=()), "engines"),
        (lambda: plots.plot_privacy_profile(DP_SGD, points=1), "points"),
        (lambda: plots.plot_privacy_profile(DP_SGD, epsilons=[np.inf]), "epsilons"),
        (lambda: plots.plot_epsilon_vs_steps(DP_SGD, steps=0, delta=1e-5), "steps"),
        (lambda: plots.plot_epsilon_vs_steps(DP_SGD, steps=3, delta=2.0), "delta"),
        (lambda: plots.plot_noise_densities({"g": Gaussian(1.0)}, x_max=-1), "x_max"),
        (lambda: plots.plot_rdp_curves({}), "descriptions"),
        (lambda: plots.privacy_profile(DP_SGD, [[0.1, 0.2]], "rdp"), "epsilons"),
        (lambda: plots.privacy_profile(DP_SGD, ["a"], "rdp"), "epsilons"),
        (lambda: plots.plot_privacy_profile(DP_SGD, engine_options={"prv": 3}, epsilons=[1.0]), "engine_options"),
        (lambda: plots.plot_epsilon_vs_steps(DP_SGD.parts[0][0], steps=3, delta=1e-5, budget_epsilon=-1), "budget_epsilon"),
    ],
)
def test_bad_arguments_raise_one_line_value_errors(call, match):
    with pytest.raises(ValueError, match=match) as error:
        call()
    assert "\n" not in str(error.value)


# ----------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "--noise-multiplier", "1", "--sampling-rate", "0.01", "--steps", "100", "--points", "5"],
        ["profile", "--noise", "laplace", "--scale", "2", "--sampling-rate", "1", "--steps", "10", "--engine", "prv", "--engine", "pure"],
        ["steps", "--noise-multiplier", "1", "--sampling-rate", "0.01", "--steps", "100", "--delta", "1e-5", "--points", "4"],
        ["noise", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "100"],
        ["noise", "--noise-multiplier", "1", "--scale", "1"],
        ["rdp", "--noise-multiplier", "1", "--sampling-rate", "0.01", "--steps", "100"],
    ],
)
def test_cli_writes_png(argv, tmp_path, capsys):
    out = tmp_path / "figure.png"
    assert main(["plot", *argv, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 5_000
    assert capsys.readouterr().out.strip() == str(out)


def test_cli_plots_a_plan_file(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'delta = 1e-5\n[budget]\nepsilon = 3.0\n[[phases]]\nnoise = "gaussian"\nnoise_multiplier = 1.0\n'
        "sampling_rate = 0.01\nsteps = 100\n"
    )
    out = tmp_path / "steps.svg"
    assert main(["plot", "steps", str(plan), "--points", "3", "--out", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["profile", "--noise-multiplier", "1"], "--out is required"),
        (["profile", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--out", "x.foo"], "--out must end in an image suffix"),
        (["profile", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--out", "/no/such/folder/x.png"], "does not exist"),
        (["profile", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--samples", "10", "--out", "x.png"], "--samples applies only"),
        (["profile", "--noise-multiplier", "-1", "--out", "x.png"], "--noise-multiplier must be"),
        (["profile", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--points", "1", "--out", "x.png"], "--points must be an integer >= 2"),
        (["profile", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--points", "1e9", "--out", "x.png"], "--points must be an integer in [2, 10000]"),
        (["profile", "--noise-multiplier", "1", "--out", "x.png"], "--sampling-rate is required"),
        (["noise", "--out", "x.png"], "nothing to draw"),
        (["noise", "--delta", "1e-5", "--out", "x.png"], "--target-epsilon"),
        (["steps", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "5", "--out", "x.png"], "--delta is required"),
        (["rdp", "--out", "x.png"], "--noise-multiplier"),
        (["steps", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "5", "--delta", "1e-5", "--budget", "-1", "--out", "x.png"], "--budget must be"),
        (["profile", "--noise-multiplier", "1", "--sampling-rate", "1", "--steps", "1", "--engine", "montecarlo", "--samples", "0", "--out", "x.png"], "--samples must be"),
    ],
)
def test_cli_errors_are_one_line_exit_2(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x.png").exists()


# ----------------------------------------------------------------- figures a reader can read (issue 13)


def _legend_clear_of_axes(ax) -> bool:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    return not legend.overlaps(axes)


def test_profile_states_the_mechanism_and_the_bracket_width():
    ax = plots.plot_privacy_profile(DP_SGD, engines=("prv", "rdp"), points=4)
    title = ax.get_title()
    assert "σ=1" in title and "q=0.01" in title and "T=300" in title
    assert "band" not in title  # no promise of bands that may be too narrow to see
    (prv,) = [line for line in ax.lines if str(line.get_label()).startswith("PRV")]
    lower, upper = delta_profile(DP_SGD, prv.get_xdata())
    width = np.max((upper - lower) / upper)
    assert f"within {100 * width:.2g} %" in prv.get_label()
    assert _legend_clear_of_axes(ax)


def test_steps_figure_names_its_phases_and_parameters():
    plan = Plan(
        delta=1e-5,
        phases=(Phase("gaussian", 1.2, 0.01, 200, name="warmup"), Phase("laplace", 2.0, 0.01, 100, name="finetune")),
        budget_epsilon=3.0,
    )
    ax = plots.plot_epsilon_vs_steps(plan, points=4)
    texts = [text.get_text().strip() for text in ax.texts]
    assert texts == ["warmup", "finetune"]
    assert "phase boundary" in [str(line.get_label()) for line in ax.lines]
    assert "Laplace b=2" in ax.get_title() and "σ=1.2" in ax.get_title() and "δ = 1e-05" in ax.get_title()
    assert _legend_clear_of_axes(ax)


def test_coinciding_noise_curves_stay_visible():
    nearly_laplace = LMO(weights=(0.0, 0.0, 1.0), uniform_low=0.99, uniform_high=1.01)
    ax = plots.plot_noise_densities({"Gaussian": Gaussian(2.0), "Laplace": Laplace(1.0), "LMO": nearly_laplace})
    styles = [line.get_linestyle() for line in ax.lines]
    widths = [line.get_linewidth() for line in ax.lines]
    orders = [line.get_zorder() for line in ax.lines]
    assert len(set(styles)) == 3  # solid, dashed, dotted: the later, thinner curve is drawn over the earlier
    assert widths == sorted(widths, reverse=True) and orders == sorted(orders)
    assert _legend_clear_of_axes(ax)


def test_rdp_legend_is_clear_of_the_curve():
    ax = plots.plot_rdp_curves({"DP-SGD": DP_SGD})
    assert _legend_clear_of_axes(ax) and "σ=1" in ax.get_title()
