"""DPTrainer / DPZOTrainer on a tiny BERT classifier built from a config (no download)."""

from __future__ import annotations

import copy
import json
import math
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("opacus")

from dpforge.budget.ledger import Ledger  # noqa: E402
from dpforge.cli.main import main as dpforge_main  # noqa: E402
from dpforge.errors import ParameterError, UnsupportedError  # noqa: E402
from dpforge.mechanisms import Gaussian, Laplace  # noqa: E402
from dpforge.train.dpsgd import AdaptiveClipping, DPSGDNoiseStep  # noqa: E402
from dpforge.train.hf import (  # noqa: E402
    LEDGER_FILE,
    PLAN_FILE,
    ZO_HISTORY_FILE,
    DPTrainer,
    DPZOTrainer,
    PoissonBatchSampler,
    PrivacyArguments,
    ZOPrivacyArguments,
    replay_from_checkpoint,
    select_parameters,
)

VOCAB, LENGTH, SIZE = 50, 12, 64


class Tokens(torch.utils.data.Dataset):
    """Label 1 when token 7 occurs more often than token 8 (a learnable toy task)."""

    def __init__(self, size: int = SIZE, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, VOCAB, (size, LENGTH), generator=generator)
        self.mask = torch.ones(size, LENGTH, dtype=torch.long)
        self.mask[::3, LENGTH - 3 :] = 0
        self.labels = ((self.ids == 7).sum(1) > (self.ids == 8).sum(1)).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "attention_mask": self.mask[index], "labels": self.labels[index]}


def tiny_bert(seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=LENGTH,
        num_labels=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertForSequenceClassification(config)


def arguments(folder, **options) -> transformers.TrainingArguments:
    settings = dict(
        output_dir=str(folder),
        per_device_train_batch_size=8,
        max_steps=3,
        learning_rate=1e-3,
        use_cpu=True,
        report_to=[],
        save_strategy="steps",
        save_steps=2,
        logging_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    settings.update(options)
    return transformers.TrainingArguments(**settings)


def full_model():
    return select_parameters(tiny_bert(), "all", freeze=["bert.embeddings.position_embeddings.weight"])


def test_dpsgd_trainer_records_steps_writes_ledger_and_a_plan_verify_accepts(tmp_path, capsys):
    trainer = DPTrainer(
        model=full_model(),
        args=arguments(tmp_path),
        train_dataset=Tokens(),
        privacy=PrivacyArguments(noise_multiplier=1.1, clip=0.5, groups="per_layer", seed=1, budget_epsilon=50.0),
    )
    trainer.train()
    assert trainer.ledger.steps == 3
    (entry,) = trainer.ledger.entries
    assert entry.sampling_rate == pytest.approx(8 / SIZE)
    assert entry.mechanism == trainer.noise_step.allocation.mechanism
    with open(tmp_path / "checkpoint-2" / LEDGER_FILE, encoding="utf-8") as handle:
        assert Ledger.from_dict(json.load(handle)).steps == 2
    capsys.readouterr()
    assert dpforge_main(["verify", str(tmp_path / PLAN_FILE)]) == 0


def test_dpsgd_gradient_is_the_clipped_per_example_sum_plus_the_step_noise(tmp_path):
    model = full_model()
    reference_model = copy.deepcopy(model)
    data = Tokens()
    privacy = PrivacyArguments(noise_multiplier=0.7, clip=0.05, groups="per_layer", seed=3)
    trainer = DPTrainer(model=model, args=arguments(tmp_path), train_dataset=data, privacy=privacy)
    batch = {key: value[:6] for key, value in torch.utils.data.default_collate([data[i] for i in range(6)]).items()}
    trainer.training_step(trainer.model, dict(batch))
    # independent per-example gradients: one backward per example
    trainable = [(n, p) for n, p in reference_model.named_parameters() if p.requires_grad]
    per_example = {n: [] for n, _ in trainable}
    for i in range(6):
        reference_model.zero_grad()
        reference_model(**{k: v[i : i + 1] for k, v in batch.items()}).loss.backward()
        for n, p in trainable:
            per_example[n].append(p.grad.detach().clone())
    reference = DPSGDNoiseStep(
        trainable,
        noise_multiplier=0.7,
        sampling_rate=trainer.sampling_rate,
        expected_batch_size=trainer.expected_batch_size,
        thresholds=0.05,
        groups="per_layer",
        generator=torch.Generator().manual_seed(3),
    )
    expected = reference.privatize({n: torch.stack(g) for n, g in per_example.items()})
    for name, parameter in trainer.model.named_parameters():
        if parameter.requires_grad:
            torch.testing.assert_close(parameter.grad, expected[name], rtol=1e-4, atol=1e-6)


def test_shared_position_embeddings_are_refused_by_name(tmp_path):
    data = Tokens()
    trainer = DPTrainer(
        model=tiny_bert(), args=arguments(tmp_path), train_dataset=data, privacy=PrivacyArguments(noise_multiplier=1.0)
    )
    batch = torch.utils.data.default_collate([data[i] for i in range(4)])
    with pytest.raises(UnsupportedError, match="position_embeddings"):
        trainer.training_step(trainer.model, batch)


def test_empty_poisson_batch_is_a_noise_only_step(tmp_path):
    data = Tokens()
    trainer = DPTrainer(
        model=select_parameters(tiny_bert(), "bitfit", keep=["classifier.weight"]),
        args=arguments(tmp_path),
        train_dataset=data,
        privacy=PrivacyArguments(noise_multiplier=2.0, clip=1.0, seed=0),
    )
    empty = trainer.get_train_dataloader().collate_fn([])
    assert empty["input_ids"].shape == (0, LENGTH)
    trainer.training_step(trainer.model, empty)
    assert trainer.ledger.steps == 1
    grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.requires_grad])
    # pure noise of std sigma * C / (q N) per coordinate
    assert grads.std().item() == pytest.approx(2.0 / 8.0, rel=0.25)
    assert not any(p.grad is not None for p in trainer.model.parameters() if not p.requires_grad)


def test_empty_poisson_batch_with_adaptive_clipping_updates_from_the_noisy_count(tmp_path):
    data = Tokens()
    adaptive = AdaptiveClipping(count_noise_std=4.0, target_quantile=0.5, learning_rate=0.2)
    trainer = DPTrainer(
        model=select_parameters(tiny_bert(), "bitfit", keep=["classifier.weight"]),
        args=arguments(tmp_path),
        train_dataset=data,
        privacy=PrivacyArguments(noise_multiplier=1.0, clip=1.0, adaptive=adaptive, seed=0),
    )
    trainer.training_step(trainer.model, trainer.get_train_dataloader().collate_fn([]))
    step = trainer.noise_step
    (count,) = step.last_counts
    b = trainer.expected_batch_size
    assert trainer.ledger.steps == 1
    assert step.thresholds == [pytest.approx(math.exp(-0.2 * (count / b + 0.5 - 0.5)), rel=1e-12)]


def test_poisson_sampler_shards_ranks_and_keeps_empty_batches():
    generator = torch.Generator().manual_seed(0)
    batches = list(PoissonBatchSampler(10, 0.3, 200, rank=1, world_size=2, generator=generator))
    assert len(batches) == 200
    assert all(i % 2 == 1 for batch in batches for i in batch)
    assert any(not batch for batch in batches)
    mean = sum(len(b) for b in batches) / 200
    assert mean == pytest.approx(1.5, rel=0.2)  # 5 indices at rate 0.3


def test_lora_selection_trains_only_adapters_and_the_head(tmp_path):
    pytest.importorskip("peft")
    model = select_parameters(tiny_bert(), "lora", r=2, target_modules=["query", "value"], task_type="SEQ_CLS")
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "classifier" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = DPTrainer(
        model=model, args=arguments(tmp_path, max_steps=2), train_dataset=Tokens(), privacy=PrivacyArguments(1.0, seed=0)
    )
    trainer.train()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed and changed <= set(trainable)
    assert trainer.ledger.steps == 2


def test_gradient_accumulation_and_bad_arguments_are_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="gradient_accumulation_steps"):
        DPTrainer(
            model=full_model(),
            args=arguments(tmp_path, gradient_accumulation_steps=2),
            train_dataset=Tokens(),
            privacy=PrivacyArguments(1.0),
        )
    with pytest.raises(ParameterError, match="sampling"):
        PrivacyArguments(1.0, sampling="fixed")
    with pytest.raises(ParameterError, match="privacy"):
        DPTrainer(model=full_model(), args=arguments(tmp_path), train_dataset=Tokens(), privacy={"noise_multiplier": 1})


def test_dpzo_trainer_laplace_history_replays_bit_for_bit(tmp_path, capsys):
    model = select_parameters(tiny_bert(), "bitfit", keep=["classifier.weight"])
    initial = copy.deepcopy(model)
    mechanism = Laplace(scale=2.0, sensitivity=1.0)
    trainer = DPZOTrainer(
        model=model,
        args=arguments(tmp_path, max_steps=4, learning_rate=1e-2),
        train_dataset=Tokens(),
        privacy=ZOPrivacyArguments(mechanism=mechanism, perturbation_scale=1e-2, seed=5, budget_epsilon=30.0),
    )
    trainer.train()
    assert trainer.ledger.steps == 4
    assert trainer.ledger.entries[0].mechanism == mechanism
    assert len(trainer.history) == 4 and len(trainer.learning_rates) == 4
    assert trainer.learning_rates[0] > trainer.learning_rates[-1]  # the Trainer's linear schedule applied
    final = os.path.join(tmp_path, "checkpoint-4")
    assert os.path.exists(os.path.join(final, ZO_HISTORY_FILE))
    replay_from_checkpoint(initial, final)
    for (name, a), (_, b) in zip(model.named_parameters(), initial.named_parameters()):
        assert torch.equal(a, b), name
    capsys.readouterr()
    assert dpforge_main(["verify", str(tmp_path / PLAN_FILE)]) == 0


def test_dpzo_refuses_a_vector_laplace_and_own_optimizers(tmp_path):
    with pytest.raises(UnsupportedError):
        trainer = DPZOTrainer(
            model=full_model(),
            args=arguments(tmp_path),
            train_dataset=Tokens(),
            privacy=ZOPrivacyArguments(mechanism=Laplace(scale=1.0, dimension=5, norm="l2")),
        )
        trainer.create_optimizer()
    model = full_model()
    with pytest.raises(ParameterError, match="optimizers"):
        DPZOTrainer(
            model=model,
            args=arguments(tmp_path),
            train_dataset=Tokens(),
            privacy=ZOPrivacyArguments(mechanism=Gaussian(1.0)),
            optimizers=(torch.optim.SGD(model.parameters(), lr=0.1), None),
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_dpsgd_and_dpzo_trainers_run_on_cuda(tmp_path):
    dp = DPTrainer(
        model=full_model(), args=arguments(tmp_path / "sgd", use_cpu=False), train_dataset=Tokens(),
        privacy=PrivacyArguments(noise_multiplier=1.0, groups="per_layer", seed=0),
    )
    dp.train()
    assert next(dp.model.parameters()).is_cuda and dp.noise_step.generator.device.type == "cuda"
    assert dp.ledger.steps == 3
    zo = DPZOTrainer(
        model=full_model(), args=arguments(tmp_path / "zo", use_cpu=False), train_dataset=Tokens(),
        privacy=ZOPrivacyArguments(mechanism=Gaussian(1.0, sensitivity=0.5), seed=0),
    )
    zo.train()
    assert zo.ledger.steps == 3 and len(zo.history) == 3


def test_resuming_restores_the_ledger_and_draws_new_noise(tmp_path):
    privacy = PrivacyArguments(noise_multiplier=1.0, clip=0.5, seed=4)
    first = DPTrainer(model=full_model(), args=arguments(tmp_path, max_steps=2), train_dataset=Tokens(), privacy=privacy)
    first.train()
    fresh = torch.Generator().manual_seed(4)
    resumed = DPTrainer(model=full_model(), args=arguments(tmp_path, max_steps=4), train_dataset=Tokens(), privacy=privacy)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.ledger.steps == 4  # 2 restored + 2 new
    assert resumed.noise_step.generator is resumed._noise_generator
    assert torch.randn(8, generator=resumed._noise_generator).tolist() != torch.randn(8, generator=fresh).tolist()
    # the resumed run now holds 4 steps in its output folder: resuming from checkpoint-2
    # again would spend steps 3-4 a second time without counting them
    with pytest.raises(ParameterError, match="spend those steps again"):
        DPTrainer(model=full_model(), args=arguments(tmp_path, max_steps=4), train_dataset=Tokens(), privacy=privacy).train(
            resume_from_checkpoint=str(tmp_path / "checkpoint-2")
        )
    with pytest.raises(ParameterError, match="ledger"):
        os.remove(tmp_path / "checkpoint-2" / LEDGER_FILE)
        DPTrainer(model=full_model(), args=arguments(tmp_path, max_steps=4), train_dataset=Tokens(), privacy=privacy).train(
            resume_from_checkpoint=str(tmp_path / "checkpoint-2")
        )


@pytest.mark.parametrize("arguments_class, first", [("PrivacyArguments", {"noise_multiplier": 1.0}), ("ZOPrivacyArguments", {"mechanism": Gaussian(1.0)})])
def test_shuffled_batches_are_refused_not_recorded_as_poisson(arguments_class, first):
    """The ledger records Poisson steps; a Poisson epsilon is no upper bound for the
    Trainer's fixed-size shuffled batches, so the trainers refuse them."""
    import dpforge.train.hf as hf

    with pytest.raises(ParameterError, match="shuffle"):
        getattr(hf, arguments_class)(**first, sampling="shuffle")
