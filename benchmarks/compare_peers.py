#!/usr/bin/env python
"""Side-by-side benchmark of dpforge against peer privacy accountants.

For every workload, each tool is timed on the same question (epsilon at delta = 1e-5,
or the noise multiplier meeting a target epsilon) and the table reports its epsilon
(with the tool's own bounds where it gives them), the median wall time over N repeats
and the ratio dpforge_time / peer_time (below 1 means dpforge is faster).

    python benchmarks/compare_peers.py                 # full run, 5 repeats
    python benchmarks/compare_peers.py --quick         # 1 repeat, slowest peers skipped
    python benchmarks/compare_peers.py --only W1,C1 --repeats 3

Results also go to JSON (``--json-out``, default ``benchmarks/results/latest.json``)
together with a description of the machine.  See ``benchmarks/README.md``.

Peers that are not installed (Opacus, autodp) are detected with importlib and
reported as "not installed"; nothing is installed by this script.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import importlib.metadata
import importlib.util
import json
import math
import multiprocessing as mp
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

DELTA = 1e-5
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"

# Settings handed to the peers (recorded in the JSON).
PRV_EPS_ERROR = 0.01  # prv-accountant: eps_error
PRV_DELTA_ERROR = 1e-10  # prv-accountant: delta_error
PLD_INTERVAL = 1e-4  # dp-accounting PLD: value_discretization_interval
PEER_CALIBRATION_TOL = 1e-3  # dp-accounting calibrate_dp_mechanism: tol (absolute, in sigma)
PEER_CALIBRATION_BRACKET = (0.5, 1.0)  # dp-accounting LowerEndpointAndGuess(lower, guess)
OPACUS_EPSILON_TOLERANCE = 0.01  # opacus get_noise_multiplier: epsilon_tolerance

Phase = tuple[float, float, int]  # (noise multiplier or Laplace scale, sampling rate, steps)


# --------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One question asked of every tool.

    ``kind`` is "gaussian" (Poisson-subsampled Gaussian phases), "laplace"
    (Poisson-subsampled Laplace phases) or "calibration" (noise multiplier of a
    Poisson-subsampled Gaussian meeting ``target_epsilon`` after ``steps`` steps).
    ``heavy`` workloads run each tool in a child process, with a per-call timeout and
    peak-memory measurement.
    """

    name: str
    kind: str
    summary: str
    phases: tuple[Phase, ...] = ()
    sampling_rate: float | None = None
    steps: int | None = None
    target_epsilon: float | None = None
    heavy: bool = False
    delta: float = DELTA

    @property
    def total_steps(self) -> int:
        if self.kind == "calibration":
            return int(self.steps or 0)
        return sum(count for _, _, count in self.phases)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["total_steps"] = self.total_steps
        data["phase_count"] = len(self.phases)
        if len(self.phases) > 10:  # the summary gives the formula; keep the JSON small
            data["phases"] = [list(p) for p in self.phases[:3]] + ["..."] + [list(self.phases[-1])]
        return data


@dataclass
class Outcome:
    """What one call of a tool returns (the timed part)."""

    epsilon: float | None = None  # the tool's answer (see README: which value each tool reports)
    lower: float | None = None  # the tool's own lower bound, when it gives one
    upper: float | None = None  # the tool's own upper bound, when it gives one
    estimate: float | None = None  # the tool's point estimate, when it gives one
    parameter: float | None = None  # calibration: the noise multiplier found
    evaluations: int | None = None  # calibration: accountant evaluations used
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Measurement:
    """One (workload, tool) cell of the table."""

    workload: str
    tool: str
    status: str  # ok | n/a | not installed | skipped | timeout | error
    note: str = ""
    epsilon: float | None = None
    lower: float | None = None
    upper: float | None = None
    estimate: float | None = None
    certified_width: float | None = None  # (upper - lower) / upper
    parameter: float | None = None
    evaluations: int | None = None
    epsilon_at_parameter_dpforge: float | None = None  # calibration cross-check (untimed)
    times_s: list[float] = field(default_factory=list)
    median_s: float | None = None
    ratio: float | None = None  # dpforge median / this tool's median (same workload)
    peak_rss_mb: float | None = None  # heavy workloads: child process high-water RSS
    added_rss_mb: float | None = None  # ... minus the RSS after imports and warm-up
    isolated: bool = False  # ran in a child process
    details: dict[str, Any] = field(default_factory=dict)

    def absorb(self, outcome: Outcome) -> None:
        for name in ("epsilon", "lower", "upper", "estimate", "parameter", "evaluations"):
            setattr(self, name, getattr(outcome, name))
        self.details.update(outcome.details)
        if self.lower is not None and self.upper is not None and self.upper > 0:
            self.certified_width = (self.upper - self.lower) / self.upper


class NotApplicable(Exception):
    """The tool has no way to answer this workload (reported as n/a with the reason)."""


# --------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------


def _gaussian(
    name: str, q: float, sigma: float, steps: int, summary: str = "", heavy: bool = False, delta: float = DELTA
) -> Workload:
    text = summary or f"q={q:g} sigma={sigma:g} T={steps:,}" + (f" delta={delta:g}" if delta != DELTA else "")
    return Workload(name, "gaussian", text, phases=((sigma, q, steps),), heavy=heavy, delta=delta)


def _calibration(name: str, target: float, q: float = 0.01, steps: int = 10_000) -> Workload:
    return Workload(
        name,
        "calibration",
        f"sigma for eps={target:g}, q={q:g} T={steps:,}",
        sampling_rate=q,
        steps=steps,
        target_epsilon=target,
    )


def build_workloads() -> list[Workload]:
    s2 = tuple((0.8 + 0.4 * i / 999, 0.01, 10) for i in range(1000))
    return [
        _gaussian("W1", 0.01, 1.0, 1_000),
        _gaussian("W2", 0.01, 1.0, 10_000),
        _gaussian("W3", 0.001, 0.8, 100_000),
        _gaussian("W4", 0.1, 2.0, 1_000),
        _gaussian("W5", 256 / 60000, 1.1, 14_062, summary="q=256/60000 sigma=1.1 T=14,062"),
        _calibration("C1", 1.0),
        _calibration("C8", 8.0),
        Workload("L1", "laplace", "Laplace scale=2 q=0.01 T=1,000", phases=((2.0, 0.01, 1_000),)),
        # tiny delta (the LMO-DP paper and most LLM fine-tuning papers use delta <= 1e-10)
        _gaussian("D10", 0.004, 1.1, 1_000, delta=1e-10),
        _gaussian("D12", 0.004, 1.1, 1_000, delta=1e-12),
        _gaussian("D15", 0.004, 1.1, 1_000, delta=1e-15),
        _gaussian("S1", 1e-4, 0.6, 1_000_000, heavy=True),
        Workload(
            "S2",
            "gaussian",
            "1,000 phases sigma_i=0.8+0.4i/999 q=0.01 x10",
            phases=s2,
            heavy=True,
        ),
        # a training ledger with a per-step noise schedule: 10,000 distinct single steps
        Workload(
            "S3",
            "gaussian",
            "10,000 single steps sigma_i=0.8+0.4i/9999 q=0.01",
            phases=tuple((0.8 + 0.4 * i / 9999, 0.01, 1) for i in range(10_000)),
            heavy=True,
        ),
    ]


WORKLOADS = {w.name: w for w in build_workloads()}
WARMUP = _gaussian("warm-up", 0.01, 1.0, 10)  # tiny untimed call made once per process and tool


# --------------------------------------------------------------------------------------
# dpforge
# --------------------------------------------------------------------------------------


def _dpforge_description(workload: Workload):
    from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled

    base = Gaussian if workload.kind == "gaussian" else Laplace
    return Composed([(PoissonSampled(base(noise), q), count) for noise, q, count in workload.phases])


def dpforge_epsilon(workload: Workload) -> Outcome:
    from dpforge.accounting import epsilon

    result = epsilon(_dpforge_description(workload), workload.delta)
    return Outcome(
        epsilon=result.upper,
        lower=result.lower,
        upper=result.upper,
        estimate=result.estimate,
        details={"accuracy": dict(result.accuracy)},
    )


def dpforge_calibrate(workload: Workload) -> Outcome:
    try:
        from dpforge.accounting import calibrate_noise_multiplier
    except ImportError as error:
        raise NotApplicable(f"calibrate_noise_multiplier not importable ({error})") from None
    result = calibrate_noise_multiplier(workload.sampling_rate, workload.steps, workload.target_epsilon, workload.delta)
    return Outcome(
        epsilon=result.epsilon,
        parameter=result.parameter,
        evaluations=result.evaluations,
        details={"rel_tolerance": getattr(result, "rel_tolerance", None)},
    )


def dpforge_upper_at(workload: Workload, sigma: float) -> float:
    """Certified dpforge upper epsilon of the calibration workload at noise ``sigma``."""
    from dpforge.accounting import epsilon
    from dpforge.mechanisms import Composed, Gaussian, PoissonSampled

    description = Composed([(PoissonSampled(Gaussian(sigma), workload.sampling_rate), workload.steps)])
    return epsilon(description, workload.delta).upper


def dpforge_warmup() -> None:
    """Compile the numba kernels (first call) so they are not part of any timing."""
    from dpforge.accounting import epsilon
    from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled

    epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 100)]), DELTA)
    epsilon(Composed([(PoissonSampled(Laplace(2.0), 0.01), 100)]), DELTA)
    try:
        from dpforge.accounting import calibrate_noise_multiplier

        calibrate_noise_multiplier(0.01, 100, 2.0, DELTA)
    except Exception:  # calibration may not be importable yet; its row says so
        pass


# --------------------------------------------------------------------------------------
# prv-accountant (Microsoft)
# --------------------------------------------------------------------------------------


def prv_epsilon(workload: Workload) -> Outcome:
    if workload.kind == "laplace":
        raise NotApplicable("no subsampled-Laplace PRV (LaplaceMechanism is unsampled)")
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant

    prvs = [PoissonSubsampledGaussianMechanism(noise_multiplier=s, sampling_probability=q) for s, q, _ in workload.phases]
    counts = [count for _, _, count in workload.phases]
    accountant = PRVAccountant(
        prvs=prvs, max_self_compositions=counts, eps_error=PRV_EPS_ERROR,
        delta_error=min(PRV_DELTA_ERROR, 1e-3 * workload.delta),
    )
    low, estimate, high = accountant.compute_epsilon(delta=workload.delta, num_self_compositions=counts)
    return Outcome(epsilon=float(estimate), lower=float(low), upper=float(high), estimate=float(estimate))


def prv_calibrate(workload: Workload) -> Outcome:
    raise NotApplicable("prv-accountant has no calibrator")


# --------------------------------------------------------------------------------------
# dp-accounting (Google): PLD and RDP
# --------------------------------------------------------------------------------------


def pld_epsilon(workload: Workload) -> Outcome:
    from dp_accounting.pld import privacy_loss_distribution as pldm

    composed = None
    for noise, q, count in workload.phases:
        if workload.kind == "gaussian":
            pld = pldm.from_gaussian_mechanism(
                noise, sampling_prob=q, value_discretization_interval=PLD_INTERVAL, use_connect_dots=True
            )
        else:
            pld = pldm.from_laplace_mechanism(
                noise, sensitivity=1, sampling_prob=q, value_discretization_interval=PLD_INTERVAL
            )
        pld = pld.self_compose(count)
        composed = pld if composed is None else composed.compose(pld)
    value = float(composed.get_epsilon_for_delta(workload.delta))
    return Outcome(epsilon=value, details={"kind": "pessimistic estimate"})


def _dp_event(workload: Workload, sigma: float | None = None):
    """The dp-accounting event of a Gaussian workload (or of a calibration at ``sigma``)."""
    from dp_accounting import dp_event as de

    if workload.kind == "calibration":
        inner = de.PoissonSampledDpEvent(workload.sampling_rate, de.GaussianDpEvent(sigma))
        return de.SelfComposedDpEvent(inner, workload.steps)
    if workload.kind != "gaussian":
        raise NotApplicable("RdpAccountant: Poisson sampling of Gaussian events only")
    events = [de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(s)), count)
              for s, q, count in workload.phases]
    return events[0] if len(events) == 1 else de.ComposedDpEvent(events)


def rdp_epsilon(workload: Workload) -> Outcome:
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    accountant = rdpa.RdpAccountant()
    accountant.compose(_dp_event(workload))
    return Outcome(epsilon=float(accountant.get_epsilon(workload.delta)), details={"kind": "RDP upper bound"})


def _make_pld_accountant():
    from dp_accounting.pld import pld_privacy_accountant

    return pld_privacy_accountant.PLDAccountant(value_discretization_interval=PLD_INTERVAL)


def _make_rdp_accountant():
    from dp_accounting.rdp import rdp_privacy_accountant

    return rdp_privacy_accountant.RdpAccountant()


def _dpacc_calibrate(workload: Workload, make_accountant: Callable[[], Any]) -> Outcome:
    import dp_accounting

    evaluations = 0

    def make_event(sigma: float):
        nonlocal evaluations
        evaluations += 1
        return _dp_event(workload, sigma)

    sigma = dp_accounting.calibrate_dp_mechanism(
        make_accountant,
        make_event,
        workload.target_epsilon,
        workload.delta,
        bracket_interval=dp_accounting.LowerEndpointAndGuess(*PEER_CALIBRATION_BRACKET),
        tol=PEER_CALIBRATION_TOL,
    )
    return Outcome(parameter=float(sigma), evaluations=evaluations)


def pld_calibrate(workload: Workload) -> Outcome:
    return _dpacc_calibrate(workload, _make_pld_accountant)


def rdp_calibrate(workload: Workload) -> Outcome:
    return _dpacc_calibrate(workload, _make_rdp_accountant)


def pld_epsilon_at(workload: Workload, sigma: float) -> float:
    return float(_make_pld_accountant().compose(_dp_event(workload, sigma)).get_epsilon(workload.delta))


def rdp_epsilon_at(workload: Workload, sigma: float) -> float:
    return float(_make_rdp_accountant().compose(_dp_event(workload, sigma)).get_epsilon(workload.delta))


# --------------------------------------------------------------------------------------
# Opacus (needs torch) and autodp: used only when importable
# --------------------------------------------------------------------------------------


def _opacus_history(workload: Workload, sigma: float | None = None) -> list[tuple[float, float, int]]:
    if workload.kind == "calibration":
        return [(sigma, workload.sampling_rate, workload.steps)]
    if workload.kind != "gaussian":
        raise NotApplicable("Opacus accountants cover the subsampled Gaussian only")
    return [(s, q, count) for s, q, count in workload.phases]


def _opacus_accountant(name: str, history):
    from opacus.accountants import PRVAccountant, RDPAccountant

    accountant = RDPAccountant() if name == "rdp" else PRVAccountant()
    accountant.history = list(history)
    return accountant


def opacus_rdp_epsilon(workload: Workload) -> Outcome:
    value = _opacus_accountant("rdp", _opacus_history(workload)).get_epsilon(delta=workload.delta)
    return Outcome(epsilon=float(value), details={"kind": "RDP upper bound"})


def opacus_prv_epsilon(workload: Workload) -> Outcome:
    value = _opacus_accountant("prv", _opacus_history(workload)).get_epsilon(delta=workload.delta, eps_error=PRV_EPS_ERROR)
    return Outcome(epsilon=float(value), details={"kind": "PRV upper (delta_error = delta/1000)"})


def _opacus_calibrate(workload: Workload, accountant: str) -> Outcome:
    from opacus.accountants.utils import get_noise_multiplier

    sigma = get_noise_multiplier(
        target_epsilon=workload.target_epsilon,
        target_delta=workload.delta,
        sample_rate=workload.sampling_rate,
        steps=workload.steps,
        accountant=accountant,
        epsilon_tolerance=OPACUS_EPSILON_TOLERANCE,
    )
    return Outcome(parameter=float(sigma))


def opacus_rdp_calibrate(workload: Workload) -> Outcome:
    return _opacus_calibrate(workload, "rdp")


def opacus_prv_calibrate(workload: Workload) -> Outcome:
    return _opacus_calibrate(workload, "prv")


def opacus_rdp_epsilon_at(workload: Workload, sigma: float) -> float:
    return float(_opacus_accountant("rdp", _opacus_history(workload, sigma)).get_epsilon(delta=workload.delta))


def opacus_prv_epsilon_at(workload: Workload, sigma: float) -> float:
    accountant = _opacus_accountant("prv", _opacus_history(workload, sigma))
    return float(accountant.get_epsilon(delta=workload.delta, eps_error=PRV_EPS_ERROR))


def autodp_epsilon(workload: Workload) -> Outcome:
    if workload.kind != "gaussian":
        raise NotApplicable("only the subsampled Gaussian is wired for autodp")
    from autodp.mechanism_zoo import GaussianMechanism
    from autodp.transformer_zoo import AmplificationBySampling, Composition

    sample = AmplificationBySampling(PoissonSampling=True)
    mechanisms = [
        sample(GaussianMechanism(sigma=s, name=f"GM{i}"), q, improved_bound_flag=True)
        for i, (s, q, _) in enumerate(workload.phases)
    ]
    composed = Composition()(mechanisms, [count for _, _, count in workload.phases])
    return Outcome(epsilon=float(composed.get_approxDP(workload.delta)), details={"kind": "RDP upper bound"})


def autodp_calibrate(workload: Workload) -> Outcome:
    raise NotApplicable("autodp calibrator not wired")


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """A row label and the functions that answer each kind of workload."""

    key: str
    module: str  # imported to decide whether the tool is installed
    distribution: str  # package name for the version in the JSON
    epsilon: Callable[[Workload], Outcome]
    calibrate: Callable[[Workload], Outcome]
    epsilon_at: Callable[[Workload, float], float] | None = None  # untimed calibration check
    warmup: Callable[[], None] | None = None  # default: one untimed call on WARMUP
    slow: frozenset[str] = frozenset()  # workloads skipped under --quick

    def run(self, workload: Workload) -> Outcome:
        if workload.kind == "calibration":
            return self.calibrate(workload)
        return self.epsilon(workload)

    def warm_up(self) -> None:
        """Untimed: imports, numba compilation and first-call caches stay out of the timings."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module(self.module)
            if self.warmup is not None:
                self.warmup()
                return
            try:
                self.run(WARMUP)
            except Exception:  # noqa: BLE001 - a failing tool reports itself in its own cells
                pass


TOOLS: dict[str, Tool] = {
    tool.key: tool
    for tool in (
        Tool("dpforge", "dpforge.accounting", "dpforge", dpforge_epsilon, dpforge_calibrate,
             epsilon_at=dpforge_upper_at, warmup=dpforge_warmup),
        Tool("prv-accountant", "prv_accountant", "prv-accountant", prv_epsilon, prv_calibrate,
             slow=frozenset({"S1", "S2", "S3"})),
        Tool("dp-acc PLD", "dp_accounting", "dp-accounting", pld_epsilon, pld_calibrate,
             epsilon_at=pld_epsilon_at, slow=frozenset({"S2", "S3"})),
        Tool("dp-acc RDP", "dp_accounting", "dp-accounting", rdp_epsilon, rdp_calibrate,
             epsilon_at=rdp_epsilon_at, slow=frozenset({"S2", "S3"})),
        Tool("opacus RDP", "opacus.accountants", "opacus", opacus_rdp_epsilon, opacus_rdp_calibrate,
             epsilon_at=opacus_rdp_epsilon_at, slow=frozenset({"S2", "S3"})),
        Tool("opacus PRV", "opacus.accountants", "opacus", opacus_prv_epsilon, opacus_prv_calibrate,
             epsilon_at=opacus_prv_epsilon_at, slow=frozenset({"S1", "S2", "S3"})),
        Tool("autodp", "autodp.transformer_zoo", "autodp", autodp_epsilon, autodp_calibrate, slow=frozenset({"S1", "S2", "S3"})),
    )
}


def availability(tool: Tool) -> str | None:
    """None when the tool imports; otherwise the reason it cannot be used."""
    if importlib.util.find_spec(tool.module.split(".")[0]) is None:
        return "not installed"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module(tool.module)
    except Exception as error:  # e.g. opacus installed but torch missing
        return f"not importable: {type(error).__name__}: {error}"
    return None


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def _proc_status_mb(field_name: str) -> float | None:
    """A memory line of /proc/self/status (Linux) in MiB, or None elsewhere."""
    try:
        for text in Path("/proc/self/status").read_text().splitlines():
            if text.startswith(field_name + ":"):
                return int(text.split()[1]) / 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset this process's peak-RSS mark (Linux: clear_refs 5); False when unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _current_rss_mb() -> float:
    current = _proc_status_mb("VmRSS")
    return current if current is not None else _peak_rss_mb()


def _peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB.

    VmHWM belongs to the process's own address space.  ru_maxrss is only the fallback:
    on Linux it also keeps the parent's RSS at the moment of the fork that preceded the
    spawn's exec, which would report the benchmark driver's memory, not the child's.
    """
    peak = _proc_status_mb("VmHWM")
    if peak is not None:
        return peak
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return value / 2**20 if sys.platform == "darwin" else value / 1024


def _timed(tool: Tool, workload: Workload) -> tuple[float, Outcome]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        outcome = tool.run(workload)
        return time.perf_counter() - start, outcome


def _failure(measurement: Measurement, error: BaseException) -> Measurement:
    if isinstance(error, NotApplicable):
        measurement.status, measurement.note = "n/a", str(error)
    else:
        measurement.status = "error"
        measurement.note = f"{type(error).__name__}: {error}"[:200]
        measurement.details["traceback"] = traceback.format_exc(limit=6)
    return measurement


def measure_inline(tool: Tool, workload: Workload, repeats: int) -> Measurement:
    measurement = Measurement(workload.name, tool.key, "ok")
    try:
        for _ in range(repeats):
            elapsed, outcome = _timed(tool, workload)
            measurement.times_s.append(elapsed)
    except Exception as error:  # noqa: BLE001 - any failure becomes a table cell
        return _failure(measurement, error)
    measurement.absorb(outcome)
    return measurement


def _child_entry(connection, tool_key: str, workload_name: str, repeats: int) -> None:
    """Child process: warm up, then time each call, sending one message per event."""
    try:
        tool, workload = TOOLS[tool_key], WORKLOADS[workload_name]
        tool.warm_up()
        baseline = _current_rss_mb()
        _reset_peak_rss()
        connection.send(("ready", baseline))
        for _ in range(repeats):
            elapsed, outcome = _timed(tool, workload)
            connection.send(("call", elapsed, asdict(outcome), _peak_rss_mb()))
        connection.send(("done",))
    except NotApplicable as error:
        connection.send(("n/a", str(error)))
    except BaseException as error:  # noqa: BLE001
        connection.send(("error", f"{type(error).__name__}: {error}"[:200], traceback.format_exc(limit=6)))
    finally:
        connection.close()


def measure_isolated(tool: Tool, workload: Workload, repeats: int, timeout: float) -> Measurement:
    """Run the calls in a fresh child process; each call gets ``timeout`` seconds.

    After imports and warm-up the child records its resident memory and resets its peak
    mark, so ``peak_rss_mb`` is the process's peak during the calls (interpreter and
    imports included) and ``added_rss_mb`` what the calls added on top of that baseline.
    """
    measurement = Measurement(workload.name, tool.key, "ok", isolated=True)
    context = mp.get_context("spawn")  # no fork: numba / BLAS threads do not survive it
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child_entry, args=(sender, tool.key, workload.name, repeats), daemon=True)
    process.start()
    sender.close()
    baseline = None
    outcome: Outcome | None = None
    setup_timeout = max(timeout, 300.0)  # imports + warm-up
    try:
        while True:
            wait = setup_timeout if baseline is None else timeout
            if not receiver.poll(wait):
                measurement.status = "timeout"
                what = "start-up and warm-up" if baseline is None else "a call"
                measurement.note = f"{what} exceeded {wait:g} s"
                break
            try:
                message = receiver.recv()
            except EOFError:
                measurement.status, measurement.note = "error", f"child exited (code {process.exitcode})"
                break
            tag = message[0]
            if tag == "ready":
                baseline = message[1]
            elif tag == "call":
                _, elapsed, data, rss = message
                measurement.times_s.append(elapsed)
                outcome = Outcome(**data)
                measurement.peak_rss_mb = rss
            elif tag == "done":
                break
            elif tag == "n/a":
                measurement.status, measurement.note = "n/a", message[1]
                break
            else:
                measurement.status, measurement.note = "error", message[1]
                measurement.details["traceback"] = message[2]
                break
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        receiver.close()
    if measurement.status == "timeout" and measurement.times_s:
        measurement.status = "ok"  # keep the calls that finished
        measurement.note = f"{len(measurement.times_s)}/{repeats} calls finished; next {measurement.note}"
    if outcome is not None and measurement.status == "ok":
        measurement.absorb(outcome)
    if baseline is not None and measurement.peak_rss_mb is not None:
        measurement.added_rss_mb = max(0.0, measurement.peak_rss_mb - baseline)
    return measurement


def calibration_checks(tool: Tool, workload: Workload, measurement: Measurement) -> None:
    """Untimed: the tool's own epsilon and dpforge's certified upper at the sigma found."""
    sigma = measurement.parameter
    if measurement.status != "ok" or sigma is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if measurement.epsilon is None and tool.epsilon_at is not None:
            try:
                measurement.epsilon = tool.epsilon_at(workload, sigma)
            except Exception as error:  # noqa: BLE001
                measurement.details["epsilon_at_error"] = repr(error)
        try:
            measurement.epsilon_at_parameter_dpforge = dpforge_upper_at(workload, sigma)
        except Exception as error:  # noqa: BLE001
            measurement.details["dpforge_check_error"] = repr(error)


def run_benchmarks(workloads: list[Workload], args: argparse.Namespace) -> list[Measurement]:
    available = {key: availability(tool) for key, tool in TOOLS.items()}
    warmup_s: dict[str, float] = {}
    for key, tool in TOOLS.items():
        if available[key] is None:
            start = time.perf_counter()
            tool.warm_up()
            warmup_s[key] = time.perf_counter() - start
            print(f"[warm-up] {key}: {warmup_s[key]:.2f} s (not counted)", file=sys.stderr)
    args.warmup_s = warmup_s
    results: list[Measurement] = []
    for workload in workloads:
        repeats = min(args.repeats, args.scale_repeats) if workload.heavy else args.repeats
        row: list[Measurement] = []
        for key, tool in TOOLS.items():
            if available[key] is not None:
                note = "" if available[key] == "not installed" else available[key]
                row.append(Measurement(workload.name, key, "not installed", note=note))
                continue
            if args.quick and workload.name in tool.slow:
                row.append(Measurement(workload.name, key, "skipped", note="slow peer, skipped under --quick"))
                continue
            if key in args.skip:
                row.append(Measurement(workload.name, key, "skipped", note="skipped (--skip)"))
                continue
            print(f"[run] {workload.name:<3} {key:<15} x{repeats}", file=sys.stderr, flush=True)
            if workload.heavy:
                measurement = measure_isolated(tool, workload, repeats, args.timeout)
            else:
                measurement = measure_inline(tool, workload, repeats)
            if measurement.times_s and measurement.status == "ok":
                measurement.median_s = statistics.median(measurement.times_s)
            if workload.kind == "calibration":
                calibration_checks(tool, workload, measurement)
            row.append(measurement)
        reference = next((m.median_s for m in row if m.tool == "dpforge"), None)
        for measurement in row:
            if measurement.tool != "dpforge" and reference and measurement.median_s:
                measurement.ratio = reference / measurement.median_s
        results.extend(row)
    return results


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------


def _num(value: float | None, decimals: int = 5) -> str:
    """Fixed decimals so bounds line up and differ visibly; huge values in e-notation."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{decimals}f}" if abs(value) < 1e4 else f"{value:.3e}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}x" if value >= 100 else f"{value:.3g}x"


def _width(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def _note(measurement: Measurement) -> str:
    if measurement.status == "ok":
        notes = [measurement.note or str(measurement.details.get("kind", ""))]
        accuracy = measurement.details.get("accuracy") or {}
        asked, achieved = accuracy.get("relative_accuracy"), accuracy.get("achieved")
        if asked is not None and achieved is not None and achieved > asked:
            notes.append(f"asked width {asked:g}, reached {achieved:.1e}")
        return "; ".join(n for n in notes if n)
    return f"{measurement.status}: {measurement.note}" if measurement.note else measurement.status


def _render(headers: list[str], rows: list[list[str]], align: str) -> str:
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) if rows else len(headers[i]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        parts = [c.ljust(w) if a == "<" else c.rjust(w) for c, w, a in zip(cells, widths, align)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [line(headers), rule]
    previous = None
    for row in rows:
        if previous is not None and row[0] and row[0] != previous:
            out.append("")
        previous = row[0] or previous
        out.append(line(row))
    return "\n".join(out)


def epsilon_table(workloads: list[Workload], results: list[Measurement]) -> str:
    headers = ["WL", "tool", "epsilon", "lower", "upper", "width", "median", "n", "dpf/peer", "peak RSS", "note"]
    rows = []
    for workload in workloads:
        if workload.kind == "calibration":
            continue
        first = True
        for m in (r for r in results if r.workload == workload.name):
            rss = "-" if m.peak_rss_mb is None else f"{m.peak_rss_mb:.0f} MiB"
            rows.append([
                workload.name if first else "", m.tool, _num(m.epsilon), _num(m.lower), _num(m.upper),
                _width(m.certified_width), _duration(m.median_s), str(len(m.times_s)) if m.times_s else "-",
                _ratio(m.ratio), rss, _note(m),
            ])
            first = False
    return _render(headers, rows, "<<>>>>>>>><")


def calibration_table(workloads: list[Workload], results: list[Measurement]) -> str:
    headers = ["WL", "tool", "sigma", "eps (tool)", "eps_up dpforge", "evals", "median", "n", "dpf/peer", "note"]
    rows = []
    for workload in workloads:
        if workload.kind != "calibration":
            continue
        first = True
        for m in (r for r in results if r.workload == workload.name):
            rows.append([
                workload.name if first else "", m.tool, _num(m.parameter, 4), _num(m.epsilon),
                _num(m.epsilon_at_parameter_dpforge), "-" if m.evaluations is None else str(m.evaluations),
                _duration(m.median_s), str(len(m.times_s)) if m.times_s else "-", _ratio(m.ratio), _note(m),
            ])
            first = False
    return _render(headers, rows, "<<>>>>>>><")


def report(workloads: list[Workload], results: list[Measurement], args: argparse.Namespace) -> str:
    lines = [f"delta = {DELTA:g} unless a workload says otherwise; times are medians of n calls; dpf/peer = dpforge median / peer median "
             "(< 1: dpforge faster); width = (upper - lower) / upper"]
    for workload in workloads:
        lines.append(f"  {workload.name:<3} {workload.summary}")
    if any(w.kind != "calibration" for w in workloads):
        lines += ["", "Epsilon at delta", epsilon_table(workloads, results)]
    if any(w.kind == "calibration" for w in workloads):
        lines += ["", "Calibration (noise multiplier for a target epsilon; eps_up dpforge = dpforge's certified "
                  "upper epsilon at the tool's sigma)", calibration_table(workloads, results)]
    return "\n".join(lines)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_revision() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10)
        return {"commit": commit.stdout.strip() or None, "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def machine_info() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    memory = None
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    peers = dict.fromkeys(tool.distribution for tool in TOOLS.values() if tool.key != "dpforge")
    distributions = ["dpforge", "numpy", "scipy", "numba", *peers, "torch"]
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_count_usable": usable,
        "memory_gib": memory,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "versions": {name: _version(name) for name in distributions},
        "git": _git_revision(),
    }


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json(path: Path, workloads: list[Workload], results: list[Measurement], args: argparse.Namespace,
               table: str) -> None:
    payload = {
        "machine": machine_info(),
        "settings": {
            "delta": DELTA,
            "repeats": args.repeats,
            "scale_repeats": args.scale_repeats,
            "quick": args.quick,
            "timeout_s": args.timeout,
            "only": args.only,
            "warmup_s": getattr(args, "warmup_s", {}),
            "prv_accountant": {"eps_error": PRV_EPS_ERROR, "delta_error": PRV_DELTA_ERROR},
            "dp_accounting_pld": {"value_discretization_interval": PLD_INTERVAL, "use_connect_dots": True},
            "dp_accounting_calibration": {"tol": PEER_CALIBRATION_TOL,
                                          "bracket": {"lower_endpoint": PEER_CALIBRATION_BRACKET[0],
                                                      "initial_guess": PEER_CALIBRATION_BRACKET[1]}},
            "opacus_calibration": {"epsilon_tolerance": OPACUS_EPSILON_TOLERANCE},
            "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        },
        "workloads": [w.to_dict() for w in workloads],
        "measurements": [asdict(m) for m in results],
        "table": table,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    from dpforge.files import atomic_write_text

    atomic_write_text(path, json.dumps(_json_safe(payload), indent=2) + "\n")


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per (workload, tool); median reported")
    parser.add_argument("--scale-repeats", type=int, default=1,
                        help="cap on repeats for the scale workloads S1-S3 (default 1; they take seconds to minutes)")
    parser.add_argument("--quick", action="store_true", help="repeats=1 and skip the slowest peers")
    parser.add_argument(
        "--skip",
        type=lambda text: frozenset(part.strip() for part in text.split(",") if part.strip()),
        default=frozenset(),
        help="comma-separated tools not to run, e.g. 'dp-acc PLD,prv-accountant' (their rows say skipped)",
    )
    parser.add_argument("--only", default=None, help="comma-separated workloads, e.g. W1,W2,C1 (default: all)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="per-call timeout in seconds for S1-S3 (run in a child process)")
    parser.add_argument("--json-out", type=Path, default=DEFAULT_JSON, help=f"JSON output (default {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    if args.repeats < 1 or args.scale_repeats < 1:
        parser.error("--repeats and --scale-repeats must be >= 1")
    if args.only:
        names = [n.strip().upper() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in WORKLOADS]
        if unknown:
            parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
        args.only = names
    unknown_tools = sorted(args.skip - set(TOOLS))
    if unknown_tools:
        parser.error(f"unknown tool(s) {', '.join(unknown_tools)}; choose from {', '.join(TOOLS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workloads = [w for w in WORKLOADS.values() if args.only is None or w.name in args.only]
    results = run_benchmarks(workloads, args)
    table = report(workloads, results, args)
    print(table)
    write_json(args.json_out, workloads, results, args, table)
    print(f"\nJSON written to {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
