"""Atomic writes: the destination is the old file or the new one, never a mix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dpforge.files import atomic_write_bytes, atomic_write_text, atomic_writer


def test_write_and_replace(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write_text(path, "one\n")
    assert path.read_text() == "one\n"
    atomic_write_bytes(path, b"two")
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary left


def test_a_link_is_followed_and_its_target_replaced(tmp_path):
    target = tmp_path / "run-7.json"
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target.name)
    atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_a_fifo_or_device_is_written_in_place(tmp_path):
    # a rename over /dev/null replaced the device by a regular file (as root)
    atomic_write_text(os.devnull, "discarded")
    assert not os.path.isfile(os.devnull)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen([sys.executable, "-c", f"print(open({str(fifo)!r}).read(), end='')"], stdout=subprocess.PIPE)
    atomic_write_text(fifo, "through the pipe")
    assert reader.communicate(timeout=30)[0] == b"through the pipe"
    assert not fifo.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="needs /proc (Linux)")
@pytest.mark.parametrize("mode", ["w", "a"])
def test_dev_stdout_is_written_through_the_open_descriptor(tmp_path, mode):
    """Redirected to a file, /dev/stdout was that file renamed over (what the process had
    printed was lost, and with > a reopened file would be written from its start)."""
    out = tmp_path / "out.txt"
    out.write_text("earlier\n")
    program = (
        "from dpforge.files import atomic_write_text\n"
        "print('before', flush=True)\n"
        "atomic_write_text('/dev/stdout', 'result\\n')\n"
        "print('after')\n"
    )
    with open(out, mode) as handle:
        subprocess.run([sys.executable, "-c", program], stdout=handle, check=True, timeout=120)
    expected = ("earlier\n" if mode == "a" else "") + "before\nresult\nafter\n"
    assert out.read_text() == expected
    piped = subprocess.run([sys.executable, "-c", program], capture_output=True, check=True, timeout=120)
    assert piped.stdout == b"before\nresult\nafter\n"


def test_error_leaves_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_writer(path) as handle:
            handle.write(b"half of the new")
            raise RuntimeError("crash")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_permissions_follow_umask(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write_text(path, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert (path.stat().st_mode & 0o777) == (0o666 & ~umask)


WRITER = r"""
import sys
from dpforge.files import atomic_write_bytes
path = sys.argv[1]
print("ready", flush=True)
i = 0
while True:
    i += 1
    atomic_write_bytes(path, (b"%08d" % i) * 200000)   # 1.6 MB of one repeated record
"""


def test_sigkill_never_leaves_a_partial_file(tmp_path):
    """SIGKILL a process rewriting a 1.6 MB file in a loop: the file is always whole."""
    path = tmp_path / "big.bin"
    atomic_write_bytes(path, b"00000000" * 200000)
    for trial in range(5):
        process = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
        assert process.stdout.readline().strip() == b"ready"
        time.sleep(0.05 + 0.03 * trial)
        process.send_signal(signal.SIGKILL)
        process.wait()
        data = path.read_bytes()
        assert len(data) == 1600000
        assert data == data[:8] * 200000


def test_dpforge_writers_go_through_atomic_files(tmp_path, monkeypatch):
    """Plans, LMO search results and figures are written by dpforge.files (no direct open)."""
    import dataclasses
    import json

    from dpforge import files
    from dpforge.budget.ledger import Ledger
    from dpforge.design.result import LMOSearchResult
    from dpforge.mechanisms import LMO, Gaussian

    written = []
    original = files.atomic_writer

    def spy(path):
        written.append(os.path.basename(os.fspath(path)))
        return original(path)

    monkeypatch.setattr(files, "atomic_writer", spy)
    ledger = Ledger()
    ledger.record(Gaussian(1.0), 0.1, steps=3)
    ledger.to_plan(tmp_path / "plan.toml", delta=1e-5)
    fields = {f.name: 1.0 for f in dataclasses.fields(LMOSearchResult)}
    fields.update(mechanism=LMO(weights=(0.0, 1.0, 0.0), exponential_rate=2.0), steps=1, delta=1e-5, objective="std",
                  components=("exponential",), evaluations=1, epsilon_evaluations=1, seed=0, stopped_early=False,
                  engine="prv")
    result = LMOSearchResult(**fields)
    result.save(tmp_path / "lmo.json")
    assert LMOSearchResult.from_dict(json.loads((tmp_path / "lmo.json").read_text())) == result
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from dpforge.plots import save

    ax = Figure().subplots()
    ax.plot([0, 1], [0, 1])
    save(ax, tmp_path / "figure.png")
    assert (tmp_path / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert written == ["plan.toml", "lmo.json", "figure.png"]
