"""The run journal: checksummed JSON lines, recovery of every complete record, torn tails."""

from __future__ import annotations

import json

import pytest

from dpforge.budget.journal import RunJournal, read_journal, record_checksum
from dpforge.budget.ledger import Ledger
from dpforge.budget.plan import load_plan
from dpforge.mechanisms import Gaussian, Laplace, PureDP


def _write_run(path, sync="record"):
    ledger = Ledger(RunJournal(path, sync=sync))
    ledger.note_noise_source("dpsgd", {"kind": "seeded", "seed": 5})
    for step in range(6):
        ledger.record(Gaussian(1.1), 0.01 if step < 4 else 0.02)
    ledger.record(Laplace(2.0), 1.0, steps=3)
    ledger.record(PureDP(0.5), 0.1, release="digest")
    ledger.journal.close()
    return ledger


def test_round_trip_and_ledger_rebuilt(tmp_path):
    path = tmp_path / "run.jsonl"
    ledger = _write_run(path)
    recovered = read_journal(path)
    assert not recovered.torn_tail and recovered.discarded_bytes == 0 and recovered.problem is None
    assert [r.seq for r in recovered.records] == list(range(len(recovered.records)))
    assert recovered.steps == ledger.steps == 10
    rebuilt = Ledger.from_journal(path)
    assert rebuilt.to_dict() == ledger.to_dict()
    assert rebuilt.noise_sources == {"dpsgd": {"kind": "seeded", "seed": 5}}
    rebuilt.to_plan(tmp_path / "plan.toml", delta=1e-5)
    assert sum(phase.steps for phase in load_plan(tmp_path / "plan.toml").phases) == 10
    for line in path.read_text().splitlines():  # every line carries its own checksum
        data = json.loads(line)
        assert data["sha256"] == record_checksum(data)


def test_every_byte_prefix_recovers_a_prefix_and_reports_the_tail(tmp_path):
    path = tmp_path / "run.jsonl"
    _write_run(path)
    raw = path.read_bytes()
    full = read_journal(raw).records
    boundaries = {0} | {i + 1 for i, byte in enumerate(raw) if byte == ord("\n")}
    for cut in range(len(raw) + 1):
        recovered = read_journal(raw[:cut])
        assert recovered.records == full[: len(recovered.records)]
        assert recovered.valid_bytes == max(b for b in boundaries if b <= cut)
        assert recovered.torn_tail == (cut not in boundaries)
        assert recovered.discarded_bytes == cut - recovered.valid_bytes


def test_damage_in_the_middle_stops_there(tmp_path):
    path = tmp_path / "run.jsonl"
    _write_run(path)
    lines = path.read_bytes().splitlines(keepends=True)
    flipped = lines[3].replace(b'"sampling_rate":0.01', b'"sampling_rate":0.02')
    assert flipped != lines[3]
    recovered = read_journal(b"".join(lines[:3] + [flipped] + lines[4:]))
    assert len(recovered.records) == 3 and recovered.torn_tail
    assert "checksum" in recovered.problem
    swapped = read_journal(b"".join(lines[:3] + [lines[4], lines[3]] + lines[5:]))
    assert len(swapped.records) == 3 and "sequence number" in swapped.problem
    assert read_journal(b"{not json\n").problem == "line 1 is not JSON"


def test_reopening_refuses_damage_before_the_end_and_leaves_the_file(tmp_path):
    """A damaged record followed by more records is not a torn write: cutting there would
    delete released steps (spent privacy), so reopening refuses and changes nothing."""
    from dpforge.errors import InputFileError

    path = tmp_path / "run.jsonl"
    _write_run(path)
    lines = path.read_bytes().splitlines(keepends=True)
    at = lines[1].index(b'"sha256":"') + len(b'"sha256":"')
    flipped = lines[1][:at] + (b"0" if lines[1][at:at + 1] != b"0" else b"1") + lines[1][at + 1 :]
    damaged = b"".join(lines[:1] + [flipped] + lines[2:])
    path.write_bytes(damaged)
    with pytest.raises(InputFileError, match="damaged before its end"):
        RunJournal(path)
    assert path.read_bytes() == damaged
    assert not read_journal(damaged).tail_is_one_torn_line


def test_reopening_cuts_a_torn_tail_and_continues(tmp_path):
    path = tmp_path / "run.jsonl"
    _write_run(path, sync="checkpoint")
    raw = path.read_bytes()
    path.write_bytes(raw[:-7])  # the last record torn
    journal = RunJournal(path)
    assert journal.recovered.torn_tail and journal.released == 9
    ledger = Ledger.from_journal(journal.recovered)
    ledger.attach_journal(journal)
    ledger.record(PureDP(0.5), 0.1)
    journal.close()
    recovered = read_journal(path)
    assert not recovered.torn_tail and recovered.steps == 10


def test_journal_refuses_gaps_and_other_mechanisms(tmp_path):
    journal = RunJournal(tmp_path / "j.jsonl")
    with pytest.raises(ValueError, match="holds 0 released steps but step 2"):
        journal.append_step(2, {"mechanism": "gaussian", "noise_multiplier": 1.0, "sensitivity": 1.0}, 0.1)
    ledger = Ledger(journal)
    ledger.record(Gaussian(1.0), 0.1, steps=2)
    journal.close()
    resumed = Ledger(RunJournal(tmp_path / "j.jsonl"))  # a ledger that restarted at step 0
    resumed.record(Gaussian(1.0), 0.1)  # step 0 again: checked, not appended
    with pytest.raises(ValueError, match="another mechanism or rate"):
        resumed.record(Gaussian(2.0), 0.1)
    assert read_journal(tmp_path / "j.jsonl").steps == 2
    with pytest.raises(ValueError, match="journal holds 0 released steps but the ledger 2"):
        ledger.attach_journal(RunJournal(tmp_path / "new.jsonl"))
    with pytest.raises(ValueError, match="sync must be one of"):
        RunJournal(tmp_path / "k.jsonl", sync="never")
    with pytest.raises(ValueError, match="cannot read journal"):
        read_journal(tmp_path / "missing.jsonl")


def test_ledger_json_file_round_trip(tmp_path):
    ledger = _write_run(tmp_path / "run.jsonl")
    ledger.save_json(tmp_path / "ledger.json")
    assert Ledger.load_json(tmp_path / "ledger.json").to_dict() == ledger.to_dict()
    (tmp_path / "torn.json").write_bytes((tmp_path / "ledger.json").read_bytes()[:-20])
    with pytest.raises(ValueError, match="cannot read ledger"):
        Ledger.load_json(tmp_path / "torn.json")


@pytest.mark.parametrize("source", [5, None, [b"{}"]])
def test_a_journal_is_a_path_or_bytes(source):
    # a TypeError from open() before
    with pytest.raises(ValueError, match="journal must be a path or the journal's bytes"):
        Ledger.from_journal(source)
