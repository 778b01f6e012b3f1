"""Checkpoints: resuming after a stop at any step reproduces the uninterrupted run bit for
bit (parameters, ledger, epsilon, thresholds, seeds) and never repeats a noise draw."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dpforge.budget.journal import RunJournal, read_journal  # noqa: E402
from dpforge.budget.ledger import Ledger  # noqa: E402
from dpforge.mechanisms import Gaussian, Laplace  # noqa: E402
from dpforge.train.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from dpforge.train.dpsgd import AdaptiveClipping, DPSGDNoiseStep, per_sample_gradients  # noqa: E402
from dpforge.train.dpzo import DPZero  # noqa: E402

STEPS = 8


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _batch(step):
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(16, 6, generator=generator), torch.randint(0, 3, (16,), generator=generator)


def _dpsgd(model_seed, noise_seed=None, ledger=None):
    model = _model(model_seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    noise = DPSGDNoiseStep(
        model, noise_multiplier=1.2, sampling_rate=0.05, expected_batch_size=16.0, thresholds=[1.0, 1.0],
        groups="per_layer", adaptive=AdaptiveClipping(count_noise_std=8.0), seed=noise_seed, ledger=ledger,
    )
    return model, optimizer, noise


def _dpsgd_step(model, optimizer, noise, step):
    x, y = _batch(step)
    grads = per_sample_gradients(model, torch.nn.functional.cross_entropy, x, y)
    optimizer.zero_grad()
    noise.step(grads)
    optimizer.step()


def test_dpsgd_resume_from_every_step_is_bit_exact(tmp_path):
    model, optimizer, noise = _dpsgd(0, noise_seed=7)
    for step in range(STEPS):
        save_checkpoint(tmp_path / f"k{step}.pt", model=model, optimizer=optimizer, dpforge=noise)
        _dpsgd_step(model, optimizer, noise, step)
    reference = [p.detach().clone() for p in model.parameters()]
    assert noise.thresholds != [1.0, 1.0]  # the thresholds did adapt
    for k in range(STEPS):
        # another initialisation and fresh OS-entropy noise: everything must come from the checkpoint
        model2, optimizer2, noise2 = _dpsgd(k + 1)
        assert noise2.noise_source == {"kind": "os-entropy"}
        load_checkpoint(tmp_path / f"k{k}.pt", model=model2, optimizer=optimizer2, dpforge=noise2)
        assert noise2.steps == k and noise2.ledger.steps == k
        for step in range(k, STEPS):
            _dpsgd_step(model2, optimizer2, noise2, step)
        assert all(torch.equal(a, b) for a, b in zip(reference, model2.parameters()))
        assert noise2.thresholds == noise.thresholds
        assert noise2.ledger.to_dict() == noise.ledger.to_dict()
        assert noise2.ledger.noise_sources == {"dpsgd": {"kind": "seeded", "seed": 7}}
    assert noise2.ledger.epsilon(1e-5).upper == noise.ledger.epsilon(1e-5).upper


def test_resume_without_checkpointed_generator_would_repeat_noise():
    """The check above can fail: a run restarted from the same seed (the old behaviour)
    draws the first step's noise again, which differs from the uninterrupted run's."""
    model, optimizer, noise = _dpsgd(0, noise_seed=7)
    for step in range(3):
        _dpsgd_step(model, optimizer, noise, step)
    model2, optimizer2, noise2 = _dpsgd(0, noise_seed=7)
    for step in range(3):
        _dpsgd_step(model2, optimizer2, noise2, step)
    saved = {k: v.clone() for k, v in model2.state_dict().items()}
    _dpsgd_step(model, optimizer, noise, 3)
    model3, optimizer3, noise3 = _dpsgd(0, noise_seed=7)
    model3.load_state_dict(saved)
    optimizer3.load_state_dict(optimizer2.state_dict())
    _dpsgd_step(model3, optimizer3, noise3, 3)  # generator restarted: reuses step 0's noise
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), model3.parameters()))


def _zo_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _zo_batch(step):
    generator = torch.Generator().manual_seed(50 + step)
    x = torch.randn(32, 5, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def _zo(model_seed, seed=None, noise_seed=None):
    model = _zo_model(model_seed)
    optimizer = DPZero(model.parameters(), lr=0.05, mechanism=Laplace(2.0, 1.0), perturbation_scale=1e-2,
                       seed=seed, noise_seed=noise_seed, sampling_rate=0.02)
    return model, optimizer


def _zo_step(model, optimizer, step):
    x, y = _zo_batch(step)
    optimizer.step(lambda: (model(x) - y).pow(2).squeeze(1))


def test_dpzero_resume_from_every_step_is_bit_exact(tmp_path):
    model, optimizer = _zo(0, seed=3, noise_seed=4)
    for step in range(STEPS):
        save_checkpoint(tmp_path / f"z{step}.pt", model=model, optimizer=optimizer)
        _zo_step(model, optimizer, step)
    reference = [p.detach().clone() for p in model.parameters()]
    seeds = [s.seed for s in optimizer.history]
    assert len(set(seeds)) == STEPS
    for k in range(STEPS):
        model2, optimizer2 = _zo(k + 1)  # fresh OS-entropy seeds and noise until the load
        load_checkpoint(tmp_path / f"z{k}.pt", model=model2, optimizer=optimizer2)
        assert optimizer2.ledger.steps == k and len(optimizer2.history) == k
        for step in range(k, STEPS):
            _zo_step(model2, optimizer2, step)
        assert all(torch.equal(a, b) for a, b in zip(reference, model2.parameters()))
        assert optimizer2.history == optimizer.history  # same seeds and scalars, none repeated
        assert optimizer2.ledger.to_dict() == optimizer.ledger.to_dict()
    assert optimizer2.ledger.epsilon(1e-5).upper == optimizer.ledger.epsilon(1e-5).upper


def test_dpzero_refuses_a_state_without_privacy_part():
    model, optimizer = _zo(0, seed=3, noise_seed=4)
    state = torch.optim.Optimizer.state_dict(optimizer)  # what DPZero.state_dict used to return
    with pytest.raises(ValueError, match="no 'dpzero' part"):
        optimizer.load_state_dict(state)


def test_journal_and_checkpoint_resume_repeats_no_record(tmp_path):
    """A run killed after releasing steps past its last checkpoint: resuming re-does those
    steps identically, the journal checks them instead of appending, and stays the
    uninterrupted run's journal."""
    path = tmp_path / "run.jsonl"
    model, optimizer, noise = _dpsgd(0, noise_seed=7, ledger=Ledger(RunJournal(tmp_path / "ref.jsonl")))
    for step in range(STEPS):
        _dpsgd_step(model, optimizer, noise, step)
    noise.ledger.journal.close()

    journal = RunJournal(path)
    model, optimizer, noise = _dpsgd(0, noise_seed=7, ledger=Ledger(journal))
    for step in range(5):
        if step == 3:
            save_checkpoint(tmp_path / "k3.pt", model=model, optimizer=optimizer, dpforge=noise)
        _dpsgd_step(model, optimizer, noise, step)
    journal.close()  # "killed" after releasing step 4 (0-based), checkpoint at 3
    journal = RunJournal(path)
    assert journal.released == 5
    model2, optimizer2, noise2 = _dpsgd(9, noise_seed=7, ledger=Ledger(journal))
    load_checkpoint(tmp_path / "k3.pt", model=model2, optimizer=optimizer2, dpforge=noise2)
    for step in range(3, STEPS):
        _dpsgd_step(model2, optimizer2, noise2, step)
    journal.close()
    ours = [(r.data["first_step"], r.data["steps"]) for r in read_journal(path).step_records()]
    theirs = [(r.data["first_step"], r.data["steps"]) for r in read_journal(tmp_path / "ref.jsonl").step_records()]
    assert ours == theirs == [(i, 1) for i in range(STEPS)]
    assert Ledger.from_journal(path).to_dict()["entries"] == noise2.ledger.to_dict()["entries"]


def test_dpzero_resume_on_other_data_is_refused(tmp_path):
    """Re-releasing a journaled step with other data would reuse its noise: refused."""
    path = tmp_path / "zo.jsonl"
    model = _zo_model(0)
    optimizer = DPZero(model.parameters(), lr=0.05, mechanism=Laplace(2.0, 1.0), perturbation_scale=1e-2,
                       seed=3, noise_seed=4, ledger=Ledger(RunJournal(path)))
    save_checkpoint(tmp_path / "z0.pt", model=model, optimizer=optimizer)
    _zo_step(model, optimizer, 0)
    optimizer.ledger.journal.close()
    model2 = _zo_model(0)
    optimizer2 = DPZero(model2.parameters(), lr=0.05, mechanism=Laplace(2.0, 1.0), perturbation_scale=1e-2,
                        ledger=Ledger(RunJournal(path)))
    load_checkpoint(tmp_path / "z0.pt", model=model2, optimizer=optimizer2)
    before = [p.detach().clone() for p in model2.parameters()]
    with pytest.raises(ValueError, match="reuse its noise"):
        _zo_step(model2, optimizer2, 1)  # other data than step 0 had
    assert all(torch.equal(a, b) for a, b in zip(before, model2.parameters()))  # nothing released
    _zo_step(model2, optimizer2, 0)  # the same data: the same release, accepted
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))


def test_checkpoint_errors(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read checkpoint"):
        load_checkpoint(bad)
    model, optimizer, noise = _dpsgd(0, noise_seed=1)
    save_checkpoint(tmp_path / "m.pt", model=model)
    with pytest.raises(ValueError, match="no dpforge state named 'x'"):
        load_checkpoint(tmp_path / "m.pt", dpforge={"x": noise})
    with pytest.raises(ValueError, match="no optimizer state"):
        load_checkpoint(tmp_path / "m.pt", optimizer=optimizer)


def test_dpsgd_resume_on_other_data_is_refused(tmp_path):
    """DP-SGD too: a journaled step re-done on other data (its noise reused) is refused
    before release, and the same data is accepted afterwards."""
    path = tmp_path / "sgd.jsonl"
    model, optimizer, noise = _dpsgd(0, noise_seed=7, ledger=Ledger(RunJournal(path)))
    save_checkpoint(tmp_path / "k0.pt", model=model, optimizer=optimizer, dpforge=noise)
    _dpsgd_step(model, optimizer, noise, 0)
    noise.ledger.journal.close()
    model2, optimizer2, noise2 = _dpsgd(0, ledger=Ledger(RunJournal(path)))
    load_checkpoint(tmp_path / "k0.pt", model=model2, optimizer=optimizer2, dpforge=noise2)
    with pytest.raises(ValueError, match="reuse its noise"):
        _dpsgd_step(model2, optimizer2, noise2, 5)  # other data than step 0 had
    assert noise2.steps == 0 and noise2.ledger.steps == 0
    _dpsgd_step(model2, optimizer2, noise2, 0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
