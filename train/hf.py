"""Hugging Face ``transformers.Trainer`` with dpforge's private steps (the ``hf`` extra).

Two Trainer subclasses, one object each:

* :class:`DPTrainer` -- DP-SGD (Abadi et al. 2016).  Per-example gradients come from
  Opacus' ``GradSampleModule`` hooks, attached to the model the Trainer already holds;
  :class:`~dpforge.train.dpsgd.DPSGDNoiseStep` clips them flat or group-wise (He et al.
  2023), adds the allocated Gaussian noise once per global step (once across
  ``torchrun`` ranks, :mod:`dpforge.train.distributed`) and records the step in a
  :class:`~dpforge.budget.ledger.Ledger`.  The Trainer's optimizer (AdamW by default)
  and learning-rate schedule then act on the noisy mean gradient (post-processing).
* :class:`DPZOTrainer` -- DP-ZO / DPZero (Tang et al. 2024; Zhang et al. 2023): two
  forward passes at theta +- lambda z, one privatised scalar per step (Gaussian, scalar
  Laplace or scalar LMO noise, docs/design.md §5), seed replay
  (:func:`dpforge.train.dpzo.replay`) from the history written with each checkpoint.

Why subclasses.  The private step changes *how the gradient is computed* (per-example
clipping before the sum; or no backward pass at all), and ``Trainer.training_step`` is
the hook transformers documents for exactly that ("Subclass and override to inject
custom behavior"); a ``TrainerCallback`` only observes the loop and cannot change the
gradient, and an optimizer wrapper sees the summed gradient, after per-example
information is gone.  The same reason makes ``get_train_dataloader`` the place for
Poisson sampling, and ``save_model`` (called for every checkpoint and for the final
model) the place to write the ledger.  Library code that subclasses Trainer for a
changed step (TRL's trainers) does the same.

Why Opacus hooks rather than ``torch.func``.  transformers >= 5 builds attention masks
with data-dependent branches (``padding_mask.all()``), which ``vmap`` refuses, so
vmap-of-grad does not run on the library's own models; Opacus' hooks (Linear,
Embedding, LayerNorm, Conv and, for LoRA, the adapters' Linear layers) do, with the
per-sample memory of Opacus itself.  A parameter whose module sees an input shared by
the batch (BERT's ``position_embeddings``: ``position_ids`` has batch dimension 1) gets
no per-example gradient; it is refused by name (freeze it, or train with LoRA/BiTFiT).

Sampling.  With ``sampling="poisson"`` (default) every global step draws each example
independently with rate q = per_device_train_batch_size * world_size / N (each rank
samples its own shard of the indices, so the union is one Poisson sample of the whole
set), which is what the recorded ``PoissonSampled`` accounting assumes; empty batches
are noise-only steps, never skipped.  ``sampling="shuffle"`` (the Trainer's fixed-size
shuffled batches) is refused: the ledger records Poisson steps, and a Poisson epsilon is
no upper bound for shuffled fixed-size batches, which can be markedly less private
(Chua et al. 2024); :mod:`dpforge.accounting.shuffled` certifies only a lower bound.

What is *not* private: the training loss the Trainer logs, and evaluation on private
data.  Gradient accumulation is refused (one private step is one optimizer step), and
``max_grad_norm`` is set to 0 (the DP clip replaces it).

Files.  Every ``save_model`` (checkpoints included) writes ``dpforge_ledger.json`` (and
for DP-ZO ``dpforge_zo_history.json``, the seeds, scalars and learning rates replay
needs) next to the weights; ``train()`` ends by writing the plan ``dpforge_plan.toml`` in
``output_dir`` (``dpforge verify`` checks it).  ``resume_from_checkpoint`` restores the
ledger (and history) from the checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch
import transformers
from torch.utils.data import DataLoader, Sampler

from dpforge.budget.ledger import Ledger
from dpforge.errors import ParameterError, UnsupportedError
from dpforge.files import atomic_write_text
from dpforge.mechanisms.base import Mechanism
from dpforge.train.dpsgd import AdaptiveClipping, DPSGDNoiseStep
from dpforge.train.dpzo import DPZero, ZOStep, replay
from dpforge.validation import require_positive, require_probability_open

__all__ = [
    "DPTrainer",
    "DPZOTrainer",
    "LEDGER_FILE",
    "PLAN_FILE",
    "PoissonBatchSampler",
    "PrivacyArguments",
    "ZO_HISTORY_FILE",
    "ZOPrivacyArguments",
    "load_zo_history",
    "lora_selection",
    "replay_from_checkpoint",
    "select_parameters",
]

LEDGER_FILE = "dpforge_ledger.json"
PLAN_FILE = "dpforge_plan.toml"
ZO_HISTORY_FILE = "dpforge_zo_history.json"
SAMPLINGS = ("poisson",)


def _require_sampling(sampling: str) -> None:
    """Only Poisson batches are accounted: the ledger records ``PoissonSampled`` steps, and a
    Poisson epsilon is no upper bound for fixed-size shuffled batches (they can be markedly
    less private; :mod:`dpforge.accounting.shuffled` certifies only a lower bound)."""
    if sampling == "shuffle":
        raise ParameterError(
            "sampling='shuffle' (the Trainer's fixed-size shuffled batches) is not certified by the Poisson "
            "accounting the ledger records; use sampling='poisson'"
        )
    if sampling not in SAMPLINGS:
        raise ParameterError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
SELECTIONS = ("all", "bitfit", "lora")


# --------------------------------------------------------------------------- arguments


@dataclass(frozen=True)
class PrivacyArguments:
    """DP-SGD settings for :class:`DPTrainer` (the companion of ``TrainingArguments``).

    ``noise_multiplier`` is sigma of one step (e.g. from
    :func:`dpforge.accounting.calibrate_noise_multiplier` at the sampling rate and step
    count of the run); ``clip`` is C (flat) or one C_k per group; ``groups``, ``strategy``,
    ``shares`` and ``adaptive`` are those of :class:`~dpforge.train.dpsgd.DPSGDNoiseStep`.
    ``delta`` and ``budget_epsilon`` go into the written plan.  ``seed`` seeds the noise
    and the Poisson sampler (None: fresh from the OS; set it only for tests).
    """

    noise_multiplier: float
    clip: float | Sequence[float] = 1.0
    groups: str | Sequence[Sequence[str]] = "flat"
    strategy: str = "global"
    shares: Sequence[float] | None = None
    adaptive: AdaptiveClipping | None = None
    delta: float = 1e-5
    budget_epsilon: float | None = None
    sampling: str = "poisson"
    distributed: str = "rank0"
    seed: int | None = None

    def __post_init__(self) -> None:
        require_positive("noise_multiplier", self.noise_multiplier)
        require_probability_open("delta", self.delta)
        if self.budget_epsilon is not None:
            require_positive("budget_epsilon", self.budget_epsilon)
        _require_sampling(self.sampling)


@dataclass(frozen=True)
class ZOPrivacyArguments:
    """DP-ZO settings for :class:`DPZOTrainer`.

    ``mechanism`` privatises the clipped sum of loss differences: a Gaussian, or a scalar
    (``dimension=1``) Laplace or LMO; its ``sensitivity`` is the clip C of each
    difference.  ``perturbation_scale`` is lambda.  ``per_example_loss(outputs, inputs)``
    returns the 1-D per-example losses (default: cross entropy of 2-D ``logits`` against
    ``labels``, or squared error when the model has one output).
    """

    mechanism: Mechanism
    perturbation_scale: float = 1e-3
    delta: float = 1e-5
    budget_epsilon: float | None = None
    sampling: str = "poisson"
    seed: int | None = None
    per_example_loss: Callable[[Any, dict], torch.Tensor] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise ParameterError(f"mechanism must be a dpforge mechanism, got {type(self.mechanism).__name__}")
        require_positive("perturbation_scale", self.perturbation_scale)
        require_probability_open("delta", self.delta)
        if self.budget_epsilon is not None:
            require_positive("budget_epsilon", self.budget_epsilon)
        _require_sampling(self.sampling)


# --------------------------------------------------------------------------- parameter selections


def lora_selection(model: torch.nn.Module, **lora_options: Any) -> torch.nn.Module:
    """``peft.get_peft_model(model, LoraConfig(**lora_options))``: a model whose only
    trainable parameters are the LoRA adapters (Hu et al. 2022) and, for sequence
    classification, the head PEFT keeps trainable (``modules_to_save``)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:  # pragma: no cover - depends on the environment
        raise UnsupportedError("LoRA needs the peft package: pip install 'dpforge[hf]'") from None
    return get_peft_model(model, LoraConfig(**lora_options))


def select_parameters(model: torch.nn.Module, selection: str = "all", *, keep: Sequence[str] = (), freeze: Sequence[str] = (), **lora_options: Any) -> torch.nn.Module:
    """Choose what a private run trains; returns the model to hand to the Trainer.

    ``"all"``: every parameter except the names in ``freeze`` (e.g. BERT's
    ``position_embeddings``, which has no per-example gradient); ``"bitfit"``: biases
    and ``keep`` (DP-BiTFiT, Bu et al. 2022, :func:`~dpforge.train.bitfit.freeze_all_but_bias`);
    ``"lora"``: :func:`lora_selection` with ``lora_options`` (a new PEFT model).
    """
    if selection not in SELECTIONS:
        raise ParameterError(f"selection must be one of {', '.join(SELECTIONS)}, got {selection!r}")
    if selection == "lora":
        return lora_selection(model, **lora_options)
    if lora_options:
        raise ParameterError(f"LoRA options ({', '.join(sorted(lora_options))}) only apply to selection='lora'")
    if selection == "bitfit":
        from dpforge.train.bitfit import freeze_all_but_bias

        freeze_all_but_bias(model, keep=keep)
        return model
    names = dict(model.named_parameters())
    unknown = set(freeze) - set(names)
    if unknown:
        raise ParameterError(f"freeze names parameters the model does not have: {', '.join(sorted(unknown))}")
    for name, parameter in names.items():
        parameter.requires_grad_(name not in set(freeze))
    return model


# --------------------------------------------------------------------------- sampling


class PoissonBatchSampler(Sampler[list[int]]):
    """Poisson sampling of the indices of this rank's shard (rank, rank + W, ...):
    every index joins each batch independently with probability ``sampling_rate``;
    ``steps`` batches per epoch, empty ones included.  With one sampler per rank the
    union over ranks is one Poisson sample of the whole dataset."""

    def __init__(self, dataset_size: int, sampling_rate: float, steps: int, *, rank: int = 0, world_size: int = 1, generator: torch.Generator | None = None) -> None:
        self.indices = torch.arange(rank, int(dataset_size), int(world_size))
        self.sampling_rate = float(sampling_rate)
        self.steps = int(steps)
        self.generator = generator

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[list[int]]:
        for _ in range(self.steps):
            mask = torch.rand(len(self.indices), generator=self.generator) < self.sampling_rate
            yield self.indices[mask].tolist()


def _empty_safe(collate: Callable, dataset) -> Callable:
    """A collator that turns an empty list into a batch of 0 examples with the usual
    keys and trailing shapes (one example collated, then sliced to length 0)."""

    def collate_fn(examples):
        if examples:
            return collate(examples)
        one = collate([dataset[0]])
        return {key: value[:0] if isinstance(value, torch.Tensor) else value for key, value in one.items()}

    return collate_fn


def _batch_size(inputs: dict) -> int:
    for value in inputs.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    raise ParameterError("the batch holds no tensor with a batch dimension")


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a (Distributed)DataParallel wrapper."""
    while isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        model = model.module
    return model


# --------------------------------------------------------------------------- the shared part


class _PrivateTrainerMixin:
    """Sampling, the checks on TrainingArguments, the ledger files and the final plan."""

    privacy: Any
    ledger: Ledger

    def _setup_privacy(self, privacy, ledger: Ledger | None) -> None:
        args = self.args
        if args.gradient_accumulation_steps != 1:
            raise UnsupportedError(
                "gradient_accumulation_steps must be 1 with a private trainer (one private step is one optimizer "
                f"step), got {args.gradient_accumulation_steps}; raise per_device_train_batch_size instead"
            )
        args.max_grad_norm = 0.0  # the DP clip replaces the Trainer's clipping
        if self.train_dataset is None or not hasattr(self.train_dataset, "__len__"):
            raise ParameterError("a private trainer needs a train_dataset with a length (the sampling rate is batch / N)")
        self.dataset_size = len(self.train_dataset)
        global_batch = args.per_device_train_batch_size * max(args.world_size, 1)
        if global_batch > self.dataset_size:
            raise ParameterError(
                f"the global batch ({global_batch}) exceeds the dataset size ({self.dataset_size})"
            )
        self.sampling_rate = global_batch / self.dataset_size
        self.expected_batch_size = self.sampling_rate * self.dataset_size
        self.steps_per_epoch = max(1, round(1.0 / self.sampling_rate))
        self.ledger = ledger if ledger is not None else Ledger()
        self._seed_generators(0)

    def _seed_generators(self, offset: int) -> None:
        """Fresh noise and sampling generators.  With ``seed`` None they come from the OS;
        with a seed (tests) they are derived from (seed, offset), where a resumed run passes
        the steps already recorded, so a resumed run never repeats the first run's noise.
        Under ``distributed="shared_seed"`` the noise generator is identical on every rank
        (:func:`dpforge.train.distributed.shared_generator`)."""
        seed = self.privacy.seed
        derived = None if seed is None else int(seed) + 1_000_003 * int(offset)
        if getattr(self.privacy, "distributed", "rank0") == "shared_seed":
            from dpforge.train.distributed import shared_generator

            self._noise_generator = shared_generator(derived, device=self._noise_device())
        else:
            # DP-SGD noise is drawn where the gradients are; DP-ZO's scalar noise on the CPU
            self._noise_generator = torch.Generator(device=self._noise_device())
            if derived is None:
                self._noise_generator.seed()
            else:
                self._noise_generator.manual_seed(derived)
        self._sampler_generator = torch.Generator()
        if derived is None:
            self._sampler_generator.seed()
        else:  # one sampling stream per rank
            self._sampler_generator.manual_seed(derived * 7919 + self.args.process_index + 1)
        self._generators_changed()

    def _generators_changed(self) -> None:
        """Hand the new noise generator to the step object (subclasses)."""

    def _noise_device(self) -> torch.device:
        return torch.device("cpu")

    # -- data ---------------------------------------------------------------------------
    def get_train_dataloader(self) -> DataLoader:
        """Poisson batches (see the module docstring)."""
        sampler = PoissonBatchSampler(
            self.dataset_size,
            self.sampling_rate,
            self.steps_per_epoch,
            rank=self.args.process_index,
            world_size=max(self.args.world_size, 1),
            generator=self._sampler_generator,
        )
        return DataLoader(
            self.train_dataset,
            batch_sampler=sampler,
            collate_fn=_empty_safe(self.data_collator, self.train_dataset),
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )

    # -- files --------------------------------------------------------------------------
    def _extra_files(self) -> dict[str, str]:
        return {}

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The Trainer's save, then the ledger (and history) next to the weights."""
        super().save_model(output_dir, _internal_call=_internal_call)
        if not self.args.should_save:
            return
        folder = output_dir if output_dir is not None else self.args.output_dir
        os.makedirs(folder, exist_ok=True)
        atomic_write_text(os.path.join(folder, LEDGER_FILE), self.ledger.to_json())
        for name, text in self._extra_files().items():
            atomic_write_text(os.path.join(folder, name), text)

    def _restore(self, folder: str) -> None:
        path = os.path.join(folder, LEDGER_FILE)
        if not os.path.exists(path):
            raise ParameterError(f"resume_from_checkpoint: {path} is missing; a private run cannot resume without its ledger")
        with open(path, encoding="utf-8") as handle:
            restored = Ledger.from_dict(json.load(handle))
        spent = self._most_steps_recorded()
        if spent > restored.steps:
            raise ParameterError(
                f"resume_from_checkpoint: {folder} records {restored.steps} private steps but {self.args.output_dir} "
                f"already holds a ledger of {spent}; resuming from it would spend those steps again without counting "
                "them (resume from the latest checkpoint, or use a new output_dir and account both runs)"
            )
        self.ledger.load_state_dict(restored.state_dict())  # the step objects keep their reference

    def _most_steps_recorded(self) -> int:
        """The most private steps any ledger already written under ``output_dir`` records
        (its own and every checkpoint's): steps taken, released or not, are spent."""
        folder = self.args.output_dir
        paths = [os.path.join(folder, LEDGER_FILE)]
        if os.path.isdir(folder):
            paths += [os.path.join(folder, name, LEDGER_FILE) for name in os.listdir(folder)]
        most = 0
        for path in paths:
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as handle:
                    most = max(most, Ledger.from_dict(json.load(handle)).steps)
        return most

    def write_plan(self, path: str | None = None):
        """Write (main process only) and return the plan of everything recorded so far;
        ``dpforge verify <path>`` checks it against ``budget_epsilon``."""
        path = path if path is not None else os.path.join(self.args.output_dir, PLAN_FILE)
        plan = self.ledger.to_plan(None, self.privacy.delta, self.privacy.budget_epsilon)
        if self.args.should_save:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.ledger.to_plan(path, self.privacy.delta, self.privacy.budget_epsilon)
        return plan

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
        """``Trainer.train``, restoring the ledger from the checkpoint when resuming, then
        writing the plan to ``output_dir/dpforge_plan.toml``."""
        if isinstance(resume_from_checkpoint, bool) and resume_from_checkpoint:
            from transformers.trainer_utils import get_last_checkpoint

            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
        if isinstance(resume_from_checkpoint, str):
            self._restore(resume_from_checkpoint)
            self._seed_generators(self.ledger.steps)
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        self.write_plan()
        return output


# --------------------------------------------------------------------------- DP-SGD


class DPTrainer(_PrivateTrainerMixin, transformers.Trainer):
    """``transformers.Trainer`` whose every optimizer step is one DP-SGD step.

    ``DPTrainer(model=..., args=TrainingArguments(...), train_dataset=...,
    privacy=PrivacyArguments(noise_multiplier=..., clip=..., groups=...))``; all other
    keyword arguments are the Trainer's.  ``trainer.ledger`` holds the recorded steps and
    ``trainer.noise_step`` the :class:`~dpforge.train.dpsgd.DPSGDNoiseStep`.
    """

    def __init__(self, *args: Any, privacy: PrivacyArguments, ledger: Ledger | None = None, **kwargs: Any) -> None:
        if not isinstance(privacy, PrivacyArguments):
            raise ParameterError(f"privacy must be a PrivacyArguments, got {type(privacy).__name__}")
        super().__init__(*args, **kwargs)
        self.privacy = privacy
        self._setup_privacy(privacy, ledger)
        from opacus import GradSampleModule

        model = self.model
        self._grad_sample = GradSampleModule(model, batch_first=True, loss_reduction="mean", strict=False)
        self._trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.noise_step = DPSGDNoiseStep(
            self._trainable,
            noise_multiplier=privacy.noise_multiplier,
            sampling_rate=self.sampling_rate,
            expected_batch_size=self.expected_batch_size,
            thresholds=privacy.clip,
            groups=privacy.groups,
            strategy=privacy.strategy,
            shares=privacy.shares,
            adaptive=privacy.adaptive,
            ledger=self.ledger,
            generator=self._noise_generator,
            distributed=privacy.distributed,
        )

    def _noise_device(self) -> torch.device:
        return next(p for p in self.model.parameters() if p.requires_grad).device

    def _generators_changed(self) -> None:
        if getattr(self, "noise_step", None) is not None:
            self.noise_step.generator = self._noise_generator

    def _per_sample(self, batch: int) -> dict[str, torch.Tensor]:
        out = {}
        for name, parameter in self._trainable:
            sample = getattr(parameter, "grad_sample", None)
            if sample is None:
                raise UnsupportedError(f"parameter {name!r} got no per-example gradient (its module is not supported by Opacus' hooks); freeze it")
            if sample.shape[0] != batch:
                raise UnsupportedError(
                    f"parameter {name!r} has no per-example gradient: its module sees an input shared by the whole "
                    f"batch (leading dimension {sample.shape[0]}, batch {batch}); freeze it (select_parameters(..., "
                    f"freeze=[{name!r}])) or train with selection='lora' or 'bitfit'"
                )
            out[name] = sample
        return out

    def training_step(self, model: torch.nn.Module, inputs: dict, num_items_in_batch: Any = None) -> torch.Tensor:
        """Forward, backward through Opacus' hooks, then the DP-SGD noise step writes the
        noisy mean gradient into ``.grad``; returns the (non-private) batch loss."""
        model.train()
        inputs = self._prepare_inputs(inputs)
        batch = _batch_size(inputs)
        device = self._trainable[0][1].device
        if batch == 0:
            # an empty Poisson batch: the noise step sums no examples and releases noise only
            # (with adaptive clipping, a noisy centred count of 0)
            loss = torch.zeros((), device=device)
            per_sample = {name: torch.zeros((0, *p.shape), device=device, dtype=p.dtype) for name, p in self._trainable}
        else:
            sync = model.no_sync if hasattr(model, "no_sync") else contextlib.nullcontext
            with sync(), warnings.catch_warnings():  # DDP must not average .grad: the noise step sums ranks once
                # Opacus' hooks on modules whose inputs need no grad (embeddings) trigger a benign warning
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                with self.compute_loss_context_manager():
                    loss = self.compute_loss(_unwrap(model), inputs)
                loss.backward()
            per_sample = self._per_sample(batch)
        self.noise_step.step(per_sample)
        for _, parameter in self._trainable:
            parameter.grad_sample = None
        return loss.detach()


# --------------------------------------------------------------------------- DP-ZO


def _default_per_example_loss(outputs: Any, inputs: dict) -> torch.Tensor:
    logits = outputs.logits if hasattr(outputs, "logits") else outputs["logits"]
    labels = inputs.get("labels")
    if labels is None:
        raise ParameterError("the batch has no 'labels'; pass ZOPrivacyArguments(per_example_loss=...)")
    if logits.dim() == 2 and logits.shape[1] == 1:
        return (logits[:, 0].float() - labels.float()).pow(2)
    if logits.dim() == 2:
        return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    raise UnsupportedError(
        f"no default per-example loss for logits of shape {tuple(logits.shape)}; pass ZOPrivacyArguments(per_example_loss=...)"
    )


class _TrainerDPZero(DPZero):
    """DPZero whose closure-less ``step()`` (the Trainer's own optimizer call) does
    nothing: the DP-ZO step runs inside ``training_step``, where the batch is known."""

    def step(self, closure=None):  # type: ignore[override]
        if closure is None:
            return None
        return super().step(closure)


class DPZOTrainer(_PrivateTrainerMixin, transformers.Trainer):
    """``transformers.Trainer`` whose every optimizer step is one DP-ZO step.

    ``DPZOTrainer(model=..., args=TrainingArguments(learning_rate=...),
    train_dataset=..., privacy=ZOPrivacyArguments(mechanism=...))``.  The optimizer is
    :class:`~dpforge.train.dpzo.DPZero` at ``args.learning_rate`` (the Trainer's schedule
    applies); no backward pass is run, so memory is the inference memory plus one
    buffer of the largest parameter tensor.  ``trainer.history`` lists the steps and
    ``trainer.learning_rates`` the rate each used (what :func:`replay` needs).
    """

    def __init__(self, *args: Any, privacy: ZOPrivacyArguments, ledger: Ledger | None = None, **kwargs: Any) -> None:
        if not isinstance(privacy, ZOPrivacyArguments):
            raise ParameterError(f"privacy must be a ZOPrivacyArguments, got {type(privacy).__name__}")
        if kwargs.get("optimizers", (None, None))[0] is not None:
            raise ParameterError("DPZOTrainer makes its own DPZero optimizer; do not pass optimizers")
        super().__init__(*args, **kwargs)
        self.privacy = privacy
        self._setup_privacy(privacy, ledger)
        self.per_example_loss = privacy.per_example_loss or _default_per_example_loss
        self.learning_rates: list[float] = []
        self.dpzero: _TrainerDPZero | None = None

    @property
    def history(self) -> list[ZOStep]:
        """The (seed, scalar) of every step so far."""
        return [] if self.dpzero is None else self.dpzero.history

    def create_optimizer(self, model: torch.nn.Module | None = None):
        """The DPZero optimizer over the trainable parameters (a single group)."""
        if self.optimizer is None:
            seeds = None if self.privacy.seed is None else int(self.privacy.seed) + 7
            self.dpzero = _TrainerDPZero(
                [p for p in self.model.parameters() if p.requires_grad],
                lr=self.args.learning_rate,
                mechanism=self.privacy.mechanism,
                perturbation_scale=self.privacy.perturbation_scale,
                sampling_rate=self.sampling_rate,
                expected_batch_size=self.expected_batch_size,
                seed=seeds,
                noise_generator=self._noise_generator,
                ledger=self.ledger,
            )
            self.optimizer = self.dpzero
        return self.optimizer

    def _generators_changed(self) -> None:
        if getattr(self, "dpzero", None) is not None:
            self.dpzero.noise_generator = self._noise_generator

    def _restore(self, folder: str) -> None:
        super()._restore(folder)
        history, rates = load_zo_history(folder)
        self._restored_history = (history, rates)

    def _extra_files(self) -> dict[str, str]:
        return {
            ZO_HISTORY_FILE: json.dumps(
                {
                    "perturbation_scale": self.privacy.perturbation_scale,
                    "steps": [[step.seed, step.scalar, rate] for step, rate in zip(self.history, self.learning_rates)],
                }
            )
        }

    def training_step(self, model: torch.nn.Module, inputs: dict, num_items_in_batch: Any = None) -> torch.Tensor:
        """The DP-ZO step (two forward passes under ``no_grad``); returns the mean loss at
        theta +- lambda z (not private)."""
        if self.dpzero is None:
            raise ParameterError("DPZOTrainer.training_step runs inside train(), after create_optimizer")
        restored = getattr(self, "_restored_history", None)
        if restored is not None:
            self.dpzero.history[:0] = restored[0]
            self.learning_rates[:0] = restored[1]
            self._restored_history = None
        model.eval()  # no dropout: both passes must see the same function
        inputs = self._prepare_inputs(inputs)
        batch = _batch_size(inputs)
        inner = _unwrap(model)

        def closure() -> torch.Tensor:
            if batch == 0:
                return torch.zeros(0, dtype=torch.float64)
            outputs = inner(**inputs)
            return self.per_example_loss(outputs, inputs)

        rate = float(self.dpzero.param_groups[0]["lr"])
        loss = DPZero.step(self.dpzero, closure)
        self.learning_rates.append(rate)
        return torch.as_tensor(loss, dtype=torch.float32).detach()


def load_zo_history(folder: str) -> tuple[list[ZOStep], list[float]]:
    """The (seed, scalar) steps and learning rates written with a DP-ZO checkpoint."""
    path = os.path.join(folder, ZO_HISTORY_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        steps = [(ZOStep(int(seed), float(scalar)), float(rate)) for seed, scalar, rate in data["steps"]]
    except FileNotFoundError:
        raise ParameterError(f"{path} is missing: the folder is not a DP-ZO checkpoint") from None
    except (KeyError, TypeError, ValueError):
        raise ParameterError(f"{path} must hold {{'steps': [[seed, scalar, lr], ...]}}") from None
    return [s for s, _ in steps], [r for _, r in steps]


def replay_from_checkpoint(model: torch.nn.Module, folder: str) -> None:
    """Re-apply a DP-ZO checkpoint's history to a fresh copy of the initial model (same
    trainable parameters, same order), in place: the weights need not be stored."""
    history, rates = load_zo_history(folder)
    with open(os.path.join(folder, ZO_HISTORY_FILE), encoding="utf-8") as handle:
        scale = float(json.load(handle)["perturbation_scale"])
    replay(model, history, rates, scale)
