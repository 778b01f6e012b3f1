"""Reading the files dpforge is given: bounded, strict, one-line errors.

One job: turn a path into text (:func:`read_text`) or into a JSON object
(:func:`read_json_object`, :func:`parse_json_object`) such that every problem is one
:class:`~dpforge.errors.InputFileError` line naming the file:

* an unreadable path (missing, a folder, no permission) -- the operating system's reason;
* a file larger than :data:`MAX_INPUT_BYTES` (16 MiB), read at most that far, so that an
  endless device such as ``/dev/zero`` is refused instead of filling the memory;
* text that is not UTF-8;
* JSON that is invalid, that repeats a key in one object (the standard library would
  keep the last value silently; here it is refused, RFC 8259 Sec. 4 leaves it to the
  reader), that nests deeper than :data:`MAX_NESTING`, or that is not an object.

TOML plans are parsed by :mod:`dpforge.budget.plan` from :func:`read_text`, with the
same depth limit (:func:`check_nesting`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from dpforge.errors import InputFileError

__all__ = ["MAX_INPUT_BYTES", "MAX_NESTING", "UnreadableFileError", "check_nesting", "parse_json_object", "read_json_object", "read_text"]

#: the largest input file read (bytes): plans, ledgers and LMO files are a few KiB
MAX_INPUT_BYTES = 16 * 2**20
#: the deepest nesting of arrays/objects/tables accepted (dpforge's own files use 3)
MAX_NESTING = 32


class UnreadableFileError(InputFileError):
    """A file that cannot be read as text; ``str(error)`` is ``"<path>: <problem>"``,
    and ``problem`` and ``path`` are kept for callers that word it their own way."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self):
        return (UnreadableFileError, (self.path, self.problem))


def read_text(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of the file at ``path`` (``what`` names it in errors: "plan file");
    any problem is an :class:`UnreadableFileError`."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise UnreadableFileError(name, f"cannot read {what}: it is a folder")
    try:
        with open(name, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as error:
        raise UnreadableFileError(name, f"cannot read {what}: {error.strerror or error}") from None
    if len(raw) > max_bytes:
        raise UnreadableFileError(name, f"{what} larger than {max_bytes // 2**20} MiB; dpforge reads no file that large")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableFileError(name, f"{what} is not UTF-8 text") from None


def _depth(value: Any) -> int:
    """The nesting depth of decoded JSON/TOML (a scalar is 0), iteratively."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_NESTING:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def check_nesting(value: Any, what: str) -> None:
    """Refuse decoded data nested deeper than :data:`MAX_NESTING`."""
    if _depth(value) > MAX_NESTING:
        raise InputFileError(f"{what} is nested deeper than {MAX_NESTING} levels")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise InputFileError(f"the key {key!r} appears twice in one object")
        data[key] = value
    return data


def _no_constant(name: str) -> Any:
    raise InputFileError(f"{name} is not a JSON number (write the string \"inf\" or \"nan\")")


def parse_json_object(text: str, what: str) -> dict[str, Any]:
    """``text`` as one JSON object; any problem is one :class:`InputFileError` line."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except InputFileError as error:
        raise InputFileError(f"{what}: {error}") from None
    except json.JSONDecodeError as error:
        raise InputFileError(f"{what} is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    except RecursionError:
        raise InputFileError(f"{what} is nested deeper than {MAX_NESTING} levels") from None
    check_nesting(data, what)
    if not isinstance(data, dict):
        raise InputFileError(f"{what} must hold a JSON object, got {type(data).__name__}")
    return data


def read_json_object(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """The JSON object in the file at ``path`` (:func:`read_text`, then :func:`parse_json_object`)."""
    name = os.fspath(path)
    return parse_json_object(read_text(name, what), f"{what} {name}")
