"""Pictures of privacy guarantees: profiles, ε over training, noise densities, RDP curves.

Every function draws on a matplotlib ``Axes`` and returns it.  Without ``ax`` a new
:class:`matplotlib.figure.Figure` is made directly (no pyplot, no display needed), so
the functions work on headless machines; save with ``ax.figure.savefig(path)`` or
:func:`save`.  In a notebook the returned axes' figure shows inline.

What is drawn is what the engines certify: the PRV engine's band is its certified
[lower, upper] bracket (Gopi, Lee, Wutschitz 2021, with the pessimistic / optimistic
discretisations described in the README), the RDP curve is a certified upper bound
(Canonne, Kamath, Steinke 2020 conversion), the Monte-Carlo band is a
high-probability bracket (labelled so), and the pure engine's line is basic composition
with amplification by subsampling.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

from dpforge.accounting.api import delta as account_delta
from dpforge.accounting.api import engine_names
from dpforge.accounting.api import epsilon as account_epsilon
from dpforge.accounting.profiles import delta_profile
from dpforge.accounting.rdp import DEFAULT_ORDERS, rdp_curve
from dpforge.files import atomic_write_with
from dpforge.budget.plan import Plan
from dpforge.errors import ParameterError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism
from dpforge.mechanisms.combinators import Composed, Description
from dpforge.validation import require_non_negative, require_positive, require_probability_open

__all__ = [
    "describe",
    "plot_epsilon_vs_steps",
    "plot_noise_densities",
    "plot_privacy_profile",
    "plot_rdp_curves",
    "save",
]

#: One colour per engine, the same on every figure.
ENGINE_COLOURS = {"prv": "C0", "rdp": "C3", "montecarlo": "C2", "pure": "C1"}
#: Line styles: PRV solid; the Monte-Carlo estimate dashed, so that where it sits on the
#: PRV band both stay visible.
ENGINE_STYLES = {"prv": "-", "rdp": "-", "montecarlo": "--", "pure": "-."}
#: Where the Monte-Carlo estimate sits on the PRV curve, a thick PRV line under thin
#: Monte-Carlo dashes keeps both visible.
ENGINE_ZORDER = {"prv": 2, "rdp": 2, "montecarlo": 4, "pure": 2}
ENGINE_WIDTHS = {"prv": 2.8, "rdp": 1.5, "montecarlo": 1.2, "pure": 1.5}
#: Engines whose lower bound is a tight one, drawn as a band.  The pure engine's lower
#: bound (one step's exact ε) and the RDP engine's (0) are sound but far from tight.
BAND_ENGINES = ("prv", "montecarlo")
#: Line styles of the noise and RDP figures, in the order the curves are given.
NOISE_STYLES = ("-", "--", ":", "-.")
ENGINE_LABELS = {
    "prv": "PRV (certified)",
    "rdp": "RDP (certified upper)",
    "montecarlo": "Monte-Carlo (high-probability)",
    "pure": "pure DP (basic composition)",
}


def _axes(ax: Any = None, size: tuple[float, float] = (7.0, 5.0)) -> Any:
    """``ax``, or the axes of a new pyplot-free figure."""
    if ax is not None:
        return ax
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    return figure.add_subplot()


def _finish(ax: Any, xlabel: str, ylabel: str, title: str, subtitle: str | None = None) -> Any:
    """Labels, a light grid and the legend: the same on every figure.  ``subtitle`` (the
    mechanism's parameters) goes on a second, wrapped title line; the legend goes outside
    the axes, below them, so that it never covers a curve."""
    import textwrap

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title if not subtitle else title + "\n" + textwrap.fill(subtitle, 90), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)
    return ax


def _mechanism_text(mechanism: Mechanism) -> str:
    """One mechanism in a figure's words: "Gaussian σ=1.1", "Laplace b=2", "LMO (...)"."""
    sensitivity = getattr(mechanism, "sensitivity", 1.0)
    shown = "" if sensitivity == 1.0 else f", Δ={sensitivity:g}"
    if isinstance(mechanism, Gaussian):
        return f"Gaussian σ={mechanism.noise_multiplier:.4g}{shown}"
    if isinstance(mechanism, Laplace):
        return f"Laplace b={mechanism.scale:.4g}{shown}"
    if type(mechanism).__name__ == "LMO":
        weights = "/".join(f"{w:.2g}" for w in mechanism.weights)
        return f"LMO weights {weights}{shown}"
    if hasattr(mechanism, "epsilon"):
        return f"pure ε₀={mechanism.epsilon:.4g}"
    return type(mechanism).__name__


def describe(description: Description) -> str:
    """A description's parameters for a subtitle: each flattened component as
    "Gaussian σ=1, q=0.01, T=1000" (q omitted for no subsampling), joined by " + "."""
    from dpforge.mechanisms.combinators import flatten

    parts = []
    for part in flatten(description):
        rate = "" if part.sampling_rate >= 1.0 else f", q={part.sampling_rate:g}"
        parts.append(f"{_mechanism_text(part.mechanism)}{rate}, T={part.count}")
    return " + ".join(parts)


def _require_engines(engines: object) -> tuple[str, ...]:
    if isinstance(engines, str):
        engines = (engines,)
    try:
        names = tuple(engines)  # type: ignore[arg-type]
    except TypeError:
        raise ParameterError(f"engines must be a sequence of engine names from {list(engine_names())}, got {engines!r}") from None
    if not names:
        raise ParameterError(f"engines must name at least one engine from {list(engine_names())}")
    for name in names:
        if name not in engine_names():
            raise ParameterError(f"engines must be names from {list(engine_names())}, got {name!r}")
    return names


def _require_points(name: str, value: object, minimum: int = 2) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _require_epsilons(epsilons: object) -> np.ndarray:
    """A non-empty 1-d array of finite numbers >= 0."""
    try:
        grid = np.asarray(epsilons, dtype=float)
    except (TypeError, ValueError):
        grid = np.array([np.nan])
    if grid.ndim != 1 or grid.size < 1 or not np.all(np.isfinite(grid)) or np.any(grid < 0):
        raise ParameterError(f"epsilons must be a non-empty sequence of finite numbers >= 0, got {epsilons!r}")
    return grid


def _options_for(engine: str, engine_options: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    if engine_options is None:
        return {}
    if not isinstance(engine_options, Mapping):
        raise ParameterError("engine_options must map an engine name to a dict of its options")
    options = engine_options.get(engine, {})
    if not isinstance(options, Mapping):
        raise ParameterError(f"engine_options[{engine!r}] must be a dict of that engine's options, got {options!r}")
    return dict(options)


# --------------------------------------------------------------------------- privacy profile


def privacy_profile(
    description: Description,
    epsilons: Sequence[float],
    engine: str = "prv",
    **engine_options: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on δ(ε) at each of ``epsilons`` from one engine.

    δ(ε) = sup over neighbours of E[(1 − e^{ε − L})₊] (the hockey-stick divergence; Balle
    et al. 2018).  The RDP and pure engines give a trivial lower bound 0.
    """
    (engine,) = _require_engines((engine,))
    grid = _require_epsilons(epsilons)
    if engine == "prv":
        return delta_profile(description, grid, **engine_options)
    lower, upper = [], []
    for value in grid:
        result = account_delta(description, float(value), engine=engine, **engine_options)
        lower.append(result.lower)
        upper.append(result.upper)
    return np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)


def _default_epsilons(description: Description, engine: str, options: dict[str, Any], points: int) -> np.ndarray:
    """From a tenth of ε(1e-3) to ε(1e-9) of the first engine: the range where δ matters."""
    top = account_epsilon(description, 1e-9, engine=engine, **options).upper
    low = account_epsilon(description, 1e-3, engine=engine, **options).upper
    if not (math.isfinite(top) and top > 0):
        raise ParameterError(f"the {engine} engine gives no finite epsilon at delta=1e-9 for this description; pass epsilons")
    return np.linspace(min(0.1 * low, 0.1 * top), top, points)


def plot_privacy_profile(
    description: Description,
    *,
    engines: Sequence[str] = ("prv", "rdp"),
    epsilons: Sequence[float] | None = None,
    points: int = 25,
    engine_options: Mapping[str, Mapping[str, Any]] | None = None,
    ax: Any = None,
) -> Any:
    """Privacy profile δ(ε) of ``description`` from several engines on one log-scale axes.

    The PRV and Monte-Carlo engines, whose lower bounds are tight, are drawn as a band
    from lower to upper bound; the RDP and pure engines as their upper bound.  ``epsilons`` defaults
    to ``points`` values spanning where δ runs from about 1e-3 to 1e-9 under the first
    engine.  ``engine_options`` maps an engine name to its options (e.g.
    ``{"montecarlo": {"samples": 100_000, "seed": 1}}``).
    """
    names = _require_engines(engines)
    points = _require_points("points", points)
    if epsilons is None:
        grid = _default_epsilons(description, names[0], _options_for(names[0], engine_options), points)
    else:
        grid = _require_epsilons(epsilons)
    ax = _axes(ax)
    for name in names:
        lower, upper = privacy_profile(description, grid, name, **_options_for(name, engine_options))
        colour, style = ENGINE_COLOURS[name], ENGINE_STYLES[name]
        shown = upper > 0
        label = ENGINE_LABELS[name]
        if name in BAND_ENGINES and np.any(lower > 0):
            band = lower > 0
            width = float(np.max((upper[band] - lower[band]) / upper[band]))
            # a bracket narrower than the line is stated, not promised as a visible band
            label += f"; [lower, upper] within {100 * width:.2g} %" + (", too narrow to see" if width < 0.05 else " (band)")
            ax.fill_between(grid[band], lower[band], upper[band], color=colour, alpha=0.25, linewidth=0)
            ax.plot(grid[band], lower[band], color=colour, linestyle=":", linewidth=1)
        ax.plot(grid[shown], upper[shown], color=colour, linestyle=style, label=label,
                zorder=ENGINE_ZORDER[name], linewidth=ENGINE_WIDTHS[name])
    ax.set_yscale("log")
    return _finish(ax, "ε", "δ(ε)", "Privacy profile δ(ε)", describe(description))


# --------------------------------------------------------------------------- epsilon over training


def _checkpoints(steps: int, points: int) -> np.ndarray:
    """Checkpoints 1 ≤ t ≤ ``steps``, spaced evenly on a log scale (integers, no repeats)."""
    checkpoints = np.unique(np.round(np.geomspace(1, steps, points)).astype(int))
    return checkpoints[checkpoints >= 1]


def epsilon_over_steps(
    plan_or_step: Plan | Description,
    *,
    steps: int | None = None,
    delta: float | None = None,
    engine: str = "prv",
    points: int = 24,
    **engine_options: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Checkpoints (cumulative steps) and the lower and upper ε(δ) after each.

    ``plan_or_step`` is a :class:`~dpforge.budget.plan.Plan` (its phases run in
    order; ``delta`` defaults to the plan's) or the description of ONE step, repeated
    ``steps`` times.  Composition is adaptive (sequential) composition of the steps.
    """
    (engine,) = _require_engines((engine,))
    points = _require_points("points", points)
    if isinstance(plan_or_step, Plan):
        if steps is not None:
            raise ParameterError("steps applies to a single-step description; a plan has its own steps")
        delta = plan_or_step.delta if delta is None else require_probability_open("delta", delta)
        phases = [(phase.description().parts[0][0], phase.steps) for phase in plan_or_step.phases]
    else:
        if steps is None:
            raise ParameterError("steps is required with a single-step description (an integer >= 1)")
        steps = _require_points("steps", steps, minimum=1)
        if delta is None:
            raise ParameterError("delta is required with a single-step description (a number in (0, 1))")
        delta = require_probability_open("delta", delta)
        phases = [(plan_or_step, steps)]
    total = sum(count for _, count in phases)
    checkpoints = _checkpoints(total, points)
    lower, upper = [], []
    for checkpoint in checkpoints:
        parts, remaining = [], int(checkpoint)
        for step, count in phases:
            if remaining <= 0:
                break
            parts.append((step, min(count, remaining)))
            remaining -= count
        result = account_epsilon(Composed(parts), delta, engine=engine, **engine_options)
        lower.append(result.lower)
        upper.append(result.upper)
    return checkpoints, np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)


def plot_epsilon_vs_steps(
    plan_or_step: Plan | Description,
    *,
    steps: int | None = None,
    delta: float | None = None,
    engines: Sequence[str] = ("prv",),
    points: int = 24,
    engine_options: Mapping[str, Mapping[str, Any]] | None = None,
    budget_epsilon: float | None = None,
    ax: Any = None,
) -> Any:
    """ε(δ) after each checkpoint of a plan (or of ``steps`` repeats of one step).

    Bands as in :func:`plot_privacy_profile`; phase boundaries of a plan are marked with
    vertical lines, and the budget (``budget_epsilon``, default the plan's) with a
    horizontal one.
    """
    names = _require_engines(engines)
    ax = _axes(ax)
    for name in names:
        checkpoints, lower, upper = epsilon_over_steps(
            plan_or_step, steps=steps, delta=delta, engine=name, points=points, **_options_for(name, engine_options)
        )
        colour, style = ENGINE_COLOURS[name], ENGINE_STYLES[name]
        ax.plot(checkpoints, upper, color=colour, linestyle=style, marker=".", label=ENGINE_LABELS[name],
                zorder=ENGINE_ZORDER[name], linewidth=ENGINE_WIDTHS[name])
        if name in BAND_ENGINES and np.any(lower > 0):
            ax.fill_between(checkpoints, lower, upper, color=colour, alpha=0.25, linewidth=0)
    if isinstance(plan_or_step, Plan):
        start = 1
        for index, phase in enumerate(plan_or_step.phases):
            if index:
                ax.axvline(start, color="grey", linestyle=":", linewidth=1, label="phase boundary" if index == 1 else None)
            # each phase named where it starts, along the top of the axes
            ax.text(start, 0.98, f" {phase.label(index)}", transform=ax.get_xaxis_transform(), va="top", ha="left",
                    fontsize=8, color="dimgrey", rotation=90,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
            start += phase.steps
        if budget_epsilon is None:
            budget_epsilon = plan_or_step.budget_epsilon
        shown_delta = plan_or_step.delta if delta is None else delta
        subtitle = " → ".join(
            f"{phase.label(index)}: {describe(phase.description())}" for index, phase in enumerate(plan_or_step.phases)
        )
    else:
        shown_delta = delta
        subtitle = describe(Composed([(plan_or_step, steps)]))
    if budget_epsilon is not None:
        budget_epsilon = require_non_negative("budget_epsilon", budget_epsilon)
        ax.axhline(budget_epsilon, color="black", linestyle="--", linewidth=1, label=f"budget ε = {budget_epsilon:g}")
    ax.set_xscale("log")
    return _finish(ax, "steps", f"ε at δ = {shown_delta:.3g}", f"Privacy spent over training (δ = {shown_delta:.3g})", subtitle)


# --------------------------------------------------------------------------- noise densities


def noise_density(mechanism: Mechanism, x: np.ndarray) -> np.ndarray:
    """Density of one coordinate of the additive noise of ``mechanism`` at ``x``.

    Gaussian: N(0, (σ·Δ)²); Laplace: exp(−|x|/b)/(2b); LMO: the closed-form mixture
    density (Yang et al. 2024; ``LMO.pdf``).
    """
    x = np.asarray(x, dtype=float)
    if isinstance(mechanism, Gaussian):
        std = mechanism.noise_multiplier * mechanism.sensitivity
        return np.exp(-0.5 * (x / std) ** 2) / (std * math.sqrt(2.0 * math.pi))
    if isinstance(mechanism, Laplace):
        return np.exp(-np.abs(x) / mechanism.scale) / (2.0 * mechanism.scale)
    if hasattr(mechanism, "pdf"):
        return np.asarray(mechanism.pdf(x), dtype=float)
    raise ParameterError(f"mechanisms must be Gaussian, Laplace or LMO noise, got {type(mechanism).__name__}")


def _noise_std(mechanism: Mechanism) -> float:
    if isinstance(mechanism, Gaussian):
        return mechanism.noise_multiplier * mechanism.sensitivity
    if isinstance(mechanism, Laplace):
        return math.sqrt(2.0) * mechanism.scale
    if hasattr(mechanism, "std"):
        return float(mechanism.std())
    raise ParameterError(f"mechanisms must be Gaussian, Laplace or LMO noise, got {type(mechanism).__name__}")


def _display_half_width(mechanism: Mechanism, std: float) -> float:
    """6 standard deviations, or (infinite variance) where P(X > x) falls to 1e-4."""
    if math.isfinite(std):
        return 6.0 * std
    high = 1.0
    while float(mechanism.sf(high)) > 1e-4 and high < 1e12:
        high *= 2.0
    return high


def plot_noise_densities(
    mechanisms: Mapping[str, Mechanism],
    *,
    x_max: float | None = None,
    log_scale: bool = True,
    points: int = 801,
    ax: Any = None,
) -> Any:
    """Densities of the noise of each named mechanism, on a log scale by default.

    The log scale shows the tails, which decide privacy (light Gaussian tails need a
    wider bulk) and utility (heavy LMO tails mean occasional large errors).  ``x_max``
    defaults to 6 standard deviations of the widest noise.  Labels carry each noise's
    standard deviation.
    """
    if not isinstance(mechanisms, Mapping) or not mechanisms:
        raise ParameterError("mechanisms must be a non-empty mapping of label -> Gaussian, Laplace or LMO")
    points = _require_points("points", points, minimum=3)
    stds = {label: _noise_std(mechanism) for label, mechanism in mechanisms.items()}
    if x_max is None:
        x_max = max(_display_half_width(mechanism, stds[label]) for label, mechanism in mechanisms.items())
    x_max = require_positive("x_max", x_max)
    x = np.linspace(-x_max, x_max, points)
    ax = _axes(ax)
    for index, (label, mechanism) in enumerate(mechanisms.items()):
        # thick solid first, thinner dashed/dotted on top: curves that coincide (a
        # Laplace-like LMO over its Laplace) all stay visible
        ax.plot(x, noise_density(mechanism, x), label=f"{label} (std {stds[label]:.3g})",
                linestyle=NOISE_STYLES[index % len(NOISE_STYLES)], linewidth=max(3.2 - 0.8 * index, 1.0), zorder=2 + index)
    if log_scale:
        ax.set_yscale("log")
        floor = max(1e-12, ax.get_ylim()[0])
        ax.set_ylim(bottom=floor)
    return _finish(ax, "noise value (one coordinate)", "density" + (" (log scale)" if log_scale else ""), "Noise densities")


# --------------------------------------------------------------------------- RDP curves


def plot_rdp_curves(
    descriptions: Mapping[str, Description],
    *,
    orders: Sequence[float] | None = None,
    ax: Any = None,
) -> Any:
    """Rényi-DP curves α ↦ ε_α of named descriptions (composed, adaptive composition by
    summation, Mironov 2017 Prop. 1), log–log axes.  Infinite orders are left out."""
    if not isinstance(descriptions, Mapping) or not descriptions:
        raise ParameterError("descriptions must be a non-empty mapping of label -> description")
    alpha = DEFAULT_ORDERS if orders is None else orders
    ax = _axes(ax)
    for index, (label, description) in enumerate(descriptions.items()):
        curve = rdp_curve(description, alpha)
        finite = np.isfinite(curve.values) & (curve.values > 0)
        ax.plot(curve.orders[finite], curve.values[finite], marker=".", markersize=3, label=label,
                linestyle=NOISE_STYLES[index % len(NOISE_STYLES)], zorder=2 + index)
    ax.set_xscale("log")
    ax.set_yscale("log")
    subtitle = describe(next(iter(descriptions.values()))) if len(descriptions) == 1 else None
    return _finish(ax, "order α", "Rényi divergence bound ε_α", "RDP curves (composed, certified upper bounds)", subtitle)


def save(ax: Any, path: str | os.PathLike[str], *, dpi: int = 120) -> str:
    """Write the figure of ``ax`` to ``path`` (format from the suffix); return the path."""
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1][1:].lower() or None
    # written atomically: a crash never leaves a truncated figure (dpforge.files)
    atomic_write_with(path, lambda handle: ax.figure.savefig(handle, dpi=dpi, format=suffix))
    return path

