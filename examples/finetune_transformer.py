"""Private fine-tuning of a small transformer classifier with the Hugging Face Trainer.

calibrate -> train with that noise -> ledger with every checkpoint -> ``dpforge verify``:

1. a BERT-style classifier is built from a ``transformers.BertConfig`` with locally
   initialised weights (nothing is downloaded) and a token-sequence sentiment task is
   generated (filler tokens carrying a few "positive" or a few "negative" tokens);
2. the noise multiplier for epsilon = 3 at delta = 1e-5 is calibrated for the run's
   sampling rate and step count (:func:`dpforge.accounting.calibrate_noise_multiplier`,
   certified PRV accounting);
3. :class:`dpforge.train.hf.DPTrainer` trains with DP-SGD, group-wise clipping (embeddings,
   encoder and head, one threshold each, noise proportional to it) and Poisson batches;
   :class:`dpforge.train.hf.DPZOTrainer` trains with DP-ZO (two forward passes, one
   Gaussian-noised scalar per step) -- each writes its ledger with every checkpoint and
   its plan at the end;
4. ``dpforge verify`` checks each plan against the budget; a non-private Trainer run on
   the same model and data gives the reference accuracy.

Run ``python examples/finetune_transformer.py`` (about 4 minutes on 2 CPU cores; the
same command uses a GPU when one is present).  ``--help`` lists the sizes; ``--tiny``
is the setting the test suite uses.  The defaults are sized for DP-SGD to learn at
epsilon = 3 in that time: a small model (hidden 32, one layer, 16 tokens), many
generated examples (120,000) and large Poisson batches (4,096, q = 0.034, 80 steps,
under 3 epochs) -- at a fixed sampling rate and step count the noise multiplier is
fixed, so the noise std sigma * C stays put while the summed gradient grows with the batch.  DP-ZO from random
initialisation stays at chance in this budget (see the note it prints).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import transformers

from dpforge.accounting import calibrate_noise_multiplier
from dpforge.cli.main import main as dpforge_cli
from dpforge.mechanisms import Gaussian
from dpforge.train.hf import PLAN_FILE, DPTrainer, DPZOTrainer, PrivacyArguments, ZOPrivacyArguments, select_parameters

FILLER, POSITIVE, NEGATIVE = range(100, 1000), range(10, 30), range(30, 50)


class SentimentTokens(torch.utils.data.Dataset):
    """Sequences of filler tokens carrying 2 to 5 "sentiment" tokens, all from the positive
    set (label 1) or all from the negative set (label 0), at random places after a
    [CLS]-like first token."""

    def __init__(self, size: int, length: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(FILLER.start, FILLER.stop, (size, length), generator=generator)
        ids[:, 0] = 1
        labels = torch.randint(0, 2, (size,), generator=generator)
        counts = torch.randint(2, 6, (size,), generator=generator)
        for row in range(size):
            slots = torch.randperm(length - 1, generator=generator)[: int(counts[row])] + 1
            kind = POSITIVE if labels[row] == 1 else NEGATIVE
            ids[row, slots] = torch.randint(kind.start, kind.stop, (int(counts[row]),), generator=generator)
        self.ids = ids
        self.labels = labels

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.labels[index]}


def build_model(options: argparse.Namespace, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=FILLER.stop,
        hidden_size=options.hidden,
        num_hidden_layers=options.layers,
        num_attention_heads=options.heads,
        intermediate_size=2 * options.hidden,
        max_position_embeddings=options.length,
        num_labels=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertForSequenceClassification(config)
    # Position embeddings see position_ids shared by the whole batch: they have no
    # per-example gradient, so DP-SGD cannot train them (DPTrainer refuses them by name).
    # The word embeddings stay at their initial values too (a fixed random code of the
    # tokens): they would be most of the coordinates the noise has to cover.
    return select_parameters(
        model, "all", freeze=["bert.embeddings.position_embeddings.weight", "bert.embeddings.word_embeddings.weight"]
    )


def clipping_groups(model: torch.nn.Module) -> list[list[str]]:
    """Three clipping groups: the embeddings, the encoder layers, and the head (pooler and
    classifier).  Their per-example gradient norms differ by orders of magnitude (at
    initialisation, median about 0.3, 0.02 and 1), which is what group-wise clipping with
    one threshold per group is for."""
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    embeddings = [n for n in names if n.startswith("bert.embeddings.")]
    head = [n for n in names if n.startswith(("bert.pooler.", "classifier."))]
    encoder = [n for n in names if n not in embeddings and n not in head]
    return [group for group in (embeddings, encoder, head) if group]


def accuracy(model: torch.nn.Module, data: SentimentTokens, device: torch.device) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(data), 256):
            ids = data.ids[start : start + 256].to(device)
            correct += int((model(input_ids=ids).logits.argmax(-1).cpu() == data.labels[start : start + 256]).sum())
    return correct / len(data)


def training_arguments(options: argparse.Namespace, folder: str, steps: int, learning_rate: float) -> transformers.TrainingArguments:
    return transformers.TrainingArguments(
        output_dir=folder,
        per_device_train_batch_size=options.batch,
        max_steps=steps,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        use_cpu=not torch.cuda.is_available(),
        report_to=[],
        save_strategy="steps",
        save_steps=max(1, steps // 2),
        logging_strategy="no",
        disable_tqdm=True,
        seed=options.seed,
    )


def verify(plan: str) -> int:
    print(f"$ dpforge verify {plan}")
    sys.stdout.flush()
    return dpforge_cli(["verify", plan])


def run(options: argparse.Namespace) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train = SentimentTokens(options.train_size, options.length, seed=options.seed)
    test = SentimentTokens(options.test_size, options.length, seed=options.seed + 1)
    q = options.batch / len(train)
    chance = max(float(test.labels.float().mean()), 1.0 - float(test.labels.float().mean()))
    report: dict = {"device": str(device), "train_size": len(train), "sampling_rate": q, "chance_accuracy": chance}
    print(f"{len(train)} training sequences, expected batch {options.batch} (q = {q:.4f}); chance accuracy {chance:.3f}")
    codes = []

    if "nonprivate" in options.methods:
        model = build_model(options, options.seed)
        trainer = transformers.Trainer(
            model=model, args=training_arguments(options, os.path.join(options.output, "nonprivate"), options.sgd_steps, options.sgd_lr), train_dataset=train
        )
        start = time.perf_counter()
        trainer.train()
        report["nonprivate"] = {"accuracy": accuracy(model, test, device), "seconds": time.perf_counter() - start}
        print(f"non-private      accuracy {report['nonprivate']['accuracy']:.3f}")

    if "dpsgd" in options.methods:
        sigma = calibrate_noise_multiplier(q, options.sgd_steps, options.epsilon, options.delta).parameter
        model = build_model(options, options.seed)
        folder = os.path.join(options.output, "dpsgd")
        trainer = DPTrainer(
            model=model,
            args=training_arguments(options, folder, options.sgd_steps, options.sgd_lr),
            train_dataset=train,
            privacy=PrivacyArguments(
                noise_multiplier=sigma,
                clip=options.clips,
                groups=clipping_groups(model),
                strategy="equal_budget",  # noise of each group proportional to its threshold
                delta=options.delta,
                budget_epsilon=options.epsilon,
            ),
        )
        start = time.perf_counter()
        trainer.train()
        spent = trainer.ledger.epsilon(options.delta)
        report["dpsgd"] = {
            "accuracy": accuracy(model, test, device),
            "noise_multiplier": sigma,
            "steps": trainer.ledger.steps,
            "groups": len(trainer.noise_step.groups),
            "epsilon_upper": spent.upper,
            "seconds": time.perf_counter() - start,
        }
        print(
            f"DP-SGD (group-wise, {report['dpsgd']['groups']} groups)  sigma {sigma:.3f}  steps {trainer.ledger.steps}  "
            f"accuracy {report['dpsgd']['accuracy']:.3f}  certified epsilon <= {spent.upper:.3f}"
        )
        codes.append(verify(os.path.join(folder, PLAN_FILE)))

    if "dpzo" in options.methods:
        sigma = calibrate_noise_multiplier(q, options.zo_steps, options.epsilon, options.delta).parameter
        model = build_model(options, options.seed)
        folder = os.path.join(options.output, "dpzo")
        trainer = DPZOTrainer(
            model=model,
            args=training_arguments(options, folder, options.zo_steps, options.zo_lr),
            train_dataset=train,
            privacy=ZOPrivacyArguments(
                mechanism=Gaussian(sigma, sensitivity=options.zo_clip),
                perturbation_scale=1e-3,
                delta=options.delta,
                budget_epsilon=options.epsilon,
            ),
        )
        start = time.perf_counter()
        trainer.train()
        spent = trainer.ledger.epsilon(options.delta)
        report["dpzo"] = {
            "accuracy": accuracy(model, test, device),
            "noise_multiplier": sigma,
            "steps": trainer.ledger.steps,
            "epsilon_upper": spent.upper,
            "seconds": time.perf_counter() - start,
        }
        print(
            f"DP-ZO (Gaussian scalar)  sigma {sigma:.3f}  steps {trainer.ledger.steps}  "
            f"accuracy {report['dpzo']['accuracy']:.3f}  certified epsilon <= {spent.upper:.3f}"
        )
        if report["dpzo"]["accuracy"] < chance + 0.05:
            trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(
                f"  DP-ZO stays at chance here: each step moves the {trained} trained coordinates along one random "
                f"direction, so training from random initialisation needs on the order of {trained} times more steps "
                "than DP-SGD; DP-ZO is meant for fine-tuning pretrained weights"
            )
        codes.append(verify(os.path.join(folder, PLAN_FILE)))
    report["verify_exit_codes"] = codes
    return report


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="finetune_output", help="folder for checkpoints, ledgers and plans")
    parser.add_argument("--methods", default="nonprivate,dpsgd,dpzo", help="comma-separated: nonprivate, dpsgd, dpzo")
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--train-size", type=int, default=120000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--length", type=int, default=16, help="tokens per sequence")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4096, help="expected (Poisson) batch size")
    parser.add_argument("--sgd-steps", type=int, default=80)
    parser.add_argument("--sgd-lr", type=float, default=5e-3)
    parser.add_argument("--clips", default="0.3,0.02,1.0", help="DP-SGD clip of the embeddings, encoder and head groups")
    parser.add_argument("--zo-steps", type=int, default=100)
    parser.add_argument("--zo-lr", type=float, default=1e-4)
    parser.add_argument("--zo-clip", type=float, default=0.1, help="clip of each DP-ZO loss difference")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (seconds; what the tests run)")
    options = parser.parse_args(argv)
    try:
        options.clips = [float(c) for c in options.clips.split(",")]
    except ValueError:
        parser.error(f"--clips must be three numbers, got {options.clips!r}")
    if len(options.clips) != 3:
        parser.error(f"--clips must be three numbers, got {len(options.clips)}")
    options.methods = {m.strip() for m in options.methods.split(",") if m.strip()}
    unknown = options.methods - {"nonprivate", "dpsgd", "dpzo"}
    if unknown:
        parser.error(f"unknown methods: {', '.join(sorted(unknown))}")
    if options.tiny:
        options.train_size, options.test_size, options.length = 128, 64, 12
        options.hidden, options.layers, options.heads, options.batch = 16, 1, 2, 32
        options.sgd_steps, options.zo_steps = 3, 4
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    report = run(options)
    if options.json:
        print(json.dumps(report))
    return max(report["verify_exit_codes"], default=0)


if __name__ == "__main__":
    sys.exit(main())
