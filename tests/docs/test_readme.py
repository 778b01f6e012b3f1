"""The README's examples run as written: every ```python block, and every ``dpforge``
command of the ```bash blocks (the install steps around them are the CI's own)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dpforge.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.DOTALL)
PYTHON_BLOCKS = [body for language, body in BLOCKS if language == "python"]


def _dpforge_commands() -> list[str]:
    commands, pending = [], ""
    for language, body in BLOCKS:
        if language != "bash":
            continue
        for line in body.splitlines():
            line = pending + line.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("dpforge "):
                    commands.append(part)
    return commands


COMMANDS = _dpforge_commands()


def test_the_readme_has_examples():
    assert len(PYTHON_BLOCKS) >= 2 and len(COMMANDS) >= 8
    assert README.lstrip().startswith("# dpforge")
    first_block = BLOCKS[0][1].splitlines()
    assert first_block[0].startswith("pip install -e . && dpforge calibrate")
    assert first_block[1].startswith("pip install -e '.[test")


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_runs(index, tmp_path, monkeypatch):
    body = PYTHON_BLOCKS[index]
    if "import torch" in body:
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    exec(compile(body, f"README.md python block {index}", "exec"), {"__name__": "__readme__"})


@pytest.mark.parametrize("command", COMMANDS)
def test_dpforge_command_runs(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [word if not word.startswith("examples/") else str(ROOT / word) for word in shlex.split(command)[1:]]
    code = main(argv)
    expected = 1 if "over_budget" in command else 0
    assert code == expected, capsys.readouterr().err
