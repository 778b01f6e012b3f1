"""Fixtures shared by the command-line tests: run ``dpforge`` in-process and check its output."""

from __future__ import annotations

import json

import pytest

from dpforge.cli.main import main


@pytest.fixture
def run_json(capsys):
    """``run_json(*argv)``: run ``main`` with ``--json``; exit code 0, nothing on stderr, one
    JSON object on stdout (returned)."""

    def run(*argv: str) -> dict:
        code = main([*argv, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert err == ""
        return json.loads(out)

    return run


@pytest.fixture
def run_error(capsys):
    """``run_error(*argv)``: run ``main`` expecting a usage error: exit code 2, nothing on
    stdout, one ``dpforge: error: ...`` line on stderr (returned)."""

    def run(*argv: str) -> str:
        code = main(list(argv))
        out, err = capsys.readouterr()
        assert code == 2, (out, err)
        assert out == ""
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("dpforge: error: "), err
        assert "Traceback" not in err
        return lines[0]

    return run
