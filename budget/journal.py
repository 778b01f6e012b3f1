"""The run journal: an append-only, checksummed record of every released private step.

Format (docs/design.md §7).  UTF-8 JSON lines; each line is one record, a JSON object
with the keys

* ``"seq"``: 0, 1, 2, ... (one per line, no gaps);
* ``"kind"``: ``"step"`` (a released step or phase) or ``"noise-source"`` (where a role's
  noise comes from);
* for ``"step"``: ``"first_step"`` (the run's step index of its first release, 0-based),
  ``"steps"`` (count), ``"mechanism"`` (:mod:`dpforge.mechanisms.serialize` form),
  ``"sampling_rate"`` and optionally ``"release"`` (a short digest of the released
  value, used to refuse reusing a step's noise on different data after a resume);
* for ``"noise-source"``: ``"role"`` and ``"source"`` (``{"kind": "seeded", "seed": s}``,
  ``{"kind": "os-entropy"}`` or ``{"kind": "secure"}``);
* ``"sha256"``: the hex SHA-256 of the record's canonical JSON without this key
  (``json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)``).

Durability.  A record is written with one ``os.write`` on an ``O_APPEND`` descriptor
*before* the step's noisy output is returned to the caller, so a SIGKILL at any instant
loses at most steps that were never released: the kernel keeps every completed write
whatever happens to the process.  ``sync="record"`` (default) also ``fsync``s after every
record, so a power cut or kernel crash loses nothing released either (about one disk
flush per step); ``sync="checkpoint"`` ``fsync``s only in :meth:`RunJournal.sync`, which
:func:`dpforge.train.checkpoint.save_checkpoint` calls, and a power cut may lose the
records since the last checkpoint (a SIGKILL still loses none).

Reading.  :func:`read_journal` keeps every complete record in order and stops at the
first line that is incomplete (no newline), is not JSON, fails its checksum or breaks
the sequence; it reports that tail (``torn_tail``, ``discarded_bytes``, ``problem``)
instead of failing or guessing.  Reopening a journal for appending truncates such a tail
first, so later records never follow a damaged line.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, Iterable

from dpforge.errors import InputFileError, ParameterError
from dpforge.files import fsync_directory

__all__ = ["JournalRecord", "Recovered", "RunJournal", "SYNC_MODES", "canonical_json", "read_journal", "record_checksum"]

SYNC_MODES = ("record", "checkpoint")


def canonical_json(data: dict[str, Any]) -> str:
    """Sorted keys, no spaces, no NaN: the text the checksum is taken over."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def record_checksum(data: dict[str, Any]) -> str:
    """SHA-256 (hex) of :func:`canonical_json` of ``data`` without its ``"sha256"`` key."""
    body = {key: value for key, value in data.items() if key != "sha256"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class JournalRecord:
    """One verified journal line (``data`` without the checksum)."""

    seq: int
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Recovered:
    """What :func:`read_journal` recovered: every complete record, and the tail it left.

    ``valid_bytes`` is the length of the intact prefix; ``discarded_bytes`` the bytes after
    it; ``problem`` says why the first discarded line was refused (None without a tail).
    """

    records: tuple[JournalRecord, ...]
    torn_tail: bool
    discarded_bytes: int
    valid_bytes: int
    problem: str | None = None

    #: whether the discarded tail is a single line with no newline: what a write
    #: interrupted by a kill leaves (each record is one write ending in its newline)
    tail_is_one_torn_line: bool = False

    @property
    def steps(self) -> int:
        """Total released steps in the recovered records."""
        return sum(int(r.data["steps"]) for r in self.records if r.kind == "step")

    def step_records(self) -> list[JournalRecord]:
        """The ``"step"`` records, in order."""
        return [r for r in self.records if r.kind == "step"]

    def noise_sources(self) -> dict[str, dict[str, Any]]:
        """Role -> source of the ``"noise-source"`` records (the last one per role)."""
        return {r.data["role"]: r.data["source"] for r in self.records if r.kind == "noise-source"}


def _check_record(data: Any, expected_seq: int, released: int) -> str | None:
    """Why ``data`` is not the next valid record (None when it is)."""
    if not isinstance(data, dict):
        return "a record must be a JSON object"
    if data.get("sha256") != record_checksum(data):
        return "checksum mismatch"
    if data.get("seq") != expected_seq:
        return f"sequence number {data.get('seq')!r} where {expected_seq} was expected"
    kind = data.get("kind")
    if kind == "step":
        steps, first = data.get("steps"), data.get("first_step")
        if not (isinstance(steps, int) and steps >= 1 and isinstance(first, int)):
            return "a step record needs integer 'first_step' and 'steps' >= 1"
        if first != released:
            return f"first_step {first} where {released} was expected"
        if not isinstance(data.get("mechanism"), dict) or not isinstance(data.get("sampling_rate"), (int, float)):
            return "a step record needs 'mechanism' and 'sampling_rate'"
    elif kind == "noise-source":
        if not isinstance(data.get("role"), str) or not isinstance(data.get("source"), dict):
            return "a noise-source record needs 'role' and 'source'"
    else:
        return f"unknown record kind {kind!r}"
    return None


def read_journal(source: str | os.PathLike[str] | bytes) -> Recovered:
    """Recover a journal (a path or its bytes): every complete, checksummed record in
    sequence, and the torn or damaged tail reported, never raised (a missing file is an
    InputFileError)."""
    if isinstance(source, (bytes, bytearray)):
        raw = bytes(source)
    elif not isinstance(source, (str, os.PathLike)):
        raise InputFileError(f"journal must be a path or the journal's bytes, got {type(source).__name__}")
    else:
        try:
            with open(os.fspath(source), "rb") as handle:
                raw = handle.read()
        except OSError as error:
            raise InputFileError(f"cannot read journal {os.fspath(source)}: {error.strerror or error}") from None
    records: list[JournalRecord] = []
    position = released = 0
    problem = None
    while position < len(raw):
        end = raw.find(b"\n", position)
        if end < 0:
            problem = "incomplete last line (no newline)"
            break
        try:
            data = json.loads(raw[position:end].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            problem = f"line {len(records) + 1} is not JSON"
            break
        problem = _check_record(data, len(records), released)
        if problem is not None:
            problem = f"line {len(records) + 1}: {problem}"
            break
        body = {key: value for key, value in data.items() if key not in ("sha256", "seq", "kind")}
        records.append(JournalRecord(data["seq"], data["kind"], body))
        if data["kind"] == "step":
            released += data["steps"]
        position = end + 1
    tail = raw[position:]
    return Recovered(
        tuple(records), position < len(raw), len(raw) - position, position, problem, bool(tail) and b"\n" not in tail
    )


class RunJournal:
    """Append-only journal at ``path`` (created if missing; a torn tail is cut first).

    ``sync`` is ``"record"`` (fsync every record) or ``"checkpoint"`` (fsync in
    :meth:`sync`); see the module docstring.  ``recovered`` is what was read on opening.
    """

    def __init__(self, path: str | os.PathLike[str], *, sync: str = "record") -> None:
        if sync not in SYNC_MODES:
            raise ParameterError(f"sync must be one of {', '.join(SYNC_MODES)}, got {sync!r}")
        self.path = os.fspath(path)
        self.sync_mode = sync
        existed = os.path.exists(self.path)
        self.recovered = read_journal(self.path) if existed else Recovered((), False, 0, 0)
        if self.recovered.torn_tail and not self.recovered.tail_is_one_torn_line:
            # damage before the last line: the records after it may be released steps, and
            # cutting them would lose spent privacy; refuse and leave the file as it is
            raise InputFileError(
                f"journal {self.path} is damaged before its end ({self.recovered.problem}; "
                f"{self.recovered.discarded_bytes} bytes follow): refusing to cut released records"
            )
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        if self.recovered.torn_tail:
            os.ftruncate(self._fd, self.recovered.valid_bytes)
            os.fsync(self._fd)
        if not existed:
            fsync_directory(os.path.dirname(os.path.abspath(self.path)))
        self._seq = len(self.recovered.records)
        self._steps = self.recovered.step_records()
        self.released = self.recovered.steps
        self._sources = self.recovered.noise_sources()

    # -- writing ------------------------------------------------------------------------
    def _append(self, kind: str, body: dict[str, Any]) -> None:
        data = {"seq": self._seq, "kind": kind, **body}
        data["sha256"] = record_checksum(data)
        line = (canonical_json(data) + "\n").encode("utf-8")
        view = memoryview(line)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        if self.sync_mode == "record":
            os.fsync(self._fd)
        self._seq += 1

    def note_noise_source(self, role: str, source: dict[str, Any]) -> None:
        """Record where ``role``'s noise comes from (skipped when the last record for the
        role already says the same)."""
        if self._sources.get(role) == source:
            return
        self._append("noise-source", {"role": str(role), "source": dict(source)})
        self._sources[role] = dict(source)

    def append_step(
        self, first_step: int, mechanism: dict[str, Any], sampling_rate: float, steps: int = 1, release: str | None = None
    ) -> None:
        """Journal ``steps`` releases starting at run step ``first_step``, before they are released.

        Steps already in the journal (a resumed run repeating released steps) are checked,
        not appended: the same mechanism and rate, and the same ``release`` digest when
        both have one; a different one raises ParameterError (that step's noise was
        already spent on other data).  A gap (``first_step`` beyond the journal) also
        raises: the journal must not miss released steps.
        """
        if first_step > self.released:
            raise ParameterError(
                f"the journal holds {self.released} released steps but step {first_step} is being recorded: "
                "attach the journal before the first step, or to a ledger loaded from it"
            )
        end = first_step + steps
        if first_step < self.released:
            self._check_repeat(first_step, min(end, self.released), mechanism, sampling_rate, steps, release)
            if end <= self.released:
                return
            first_step, steps = self.released, end - self.released
        body: dict[str, Any] = {"first_step": first_step, "steps": steps, "mechanism": mechanism, "sampling_rate": sampling_rate}
        if release is not None:
            body["release"] = str(release)
        self._append("step", body)
        self._steps.append(JournalRecord(self._seq - 1, "step", body))
        self.released = end

    def _check_repeat(self, start, stop, mechanism, sampling_rate, steps, release) -> None:
        for record in self._steps:
            first, count = record.data["first_step"], record.data["steps"]
            if first + count <= start or first >= stop:
                continue
            if record.data["mechanism"] != mechanism or record.data["sampling_rate"] != sampling_rate:
                raise ParameterError(
                    f"step {max(first, start)} was released with another mechanism or rate than the one recorded now "
                    "(the journal and the resumed run disagree)"
                )
            if first == start and count == steps and release is not None and record.data.get("release") not in (None, release):
                raise ParameterError(
                    f"step {start} was already released with a different output: resuming would reuse its noise on "
                    "other data; restore the data order of the checkpoint or start from a later one"
                )

    def sync(self) -> None:
        """fsync the journal (what ``sync="checkpoint"`` relies on)."""
        os.fsync(self._fd)

    def close(self) -> None:
        """fsync and close (idempotent)."""
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None  # type: ignore[assignment]

    def __enter__(self) -> "RunJournal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if getattr(self, "_fd", None) is not None:
                os.close(self._fd)
        except OSError:
            pass


def steps_of(records: Iterable[JournalRecord]) -> list[tuple[dict[str, Any], float, int]]:
    """(mechanism dict, sampling rate, steps) of each step record."""
    return [(r.data["mechanism"], float(r.data["sampling_rate"]), int(r.data["steps"])) for r in records if r.kind == "step"]
