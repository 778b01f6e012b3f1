"""Atomic file writes (row 0): a reader sees the old file or the new one, never a mix.

:func:`atomic_write_bytes` writes to a temporary file in the destination's own folder
(so the rename never crosses a file system), flushes and ``fsync``s it, renames it over
the destination with :func:`os.replace` (atomic on POSIX and on Windows), then
``fsync``s the folder so the rename itself survives a power cut (POSIX; skipped where a
folder cannot be opened, e.g. Windows).  A crash or a SIGKILL at any instant leaves the
destination either untouched or complete; at worst a stray ``.<name>.*.tmp`` file stays
behind in the folder.  Every file dpforge writes (plans, ledgers, journals' snapshots,
LMO search results, figures, benchmark results, checkpoints) goes through here.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
from typing import BinaryIO, Callable, Iterator

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_writer", "fsync_directory"]


def fsync_directory(folder: str | os.PathLike[str]) -> None:
    """``fsync`` a folder so renames and new names in it are durable (no-op where a
    folder cannot be opened for reading, as on Windows)."""
    try:
        descriptor = os.open(os.fspath(folder) or ".", os.O_RDONLY)
    except OSError:  # pragma: no cover - platform dependent
        return
    try:
        os.fsync(descriptor)
    except OSError:  # pragma: no cover - some file systems refuse fsync on folders
        pass
    finally:
        os.close(descriptor)


#: names of this process's open descriptors (/dev/stdout is a link to /proc/self/fd/1)
_DESCRIPTOR_NAME = re.compile(r"/(?:proc/self|dev)/fd/([0-9]+)")
_STANDARD_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def _open_descriptor(path: str) -> int | None:
    """The descriptor that ``path`` or a link it leads through names (``/dev/stdout``,
    ``/dev/fd/3``), or None.  Such a path is written through a duplicate of the descriptor:
    reopened, ``cmd > out`` would write at the file's start over what the process printed,
    and a rename would replace the file (or, for a pipe, find no folder to write in)."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on a chain of links
        match = _DESCRIPTOR_NAME.fullmatch(current)
        if match or current in _STANDARD_STREAMS:
            return int(match.group(1)) if match else _STANDARD_STREAMS[current]
        if not os.path.islink(current):
            return None
        current = os.path.abspath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return None


def _written_in_place(path: str) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder (a device, a
    FIFO, a socket): a rename over it would replace the node itself (as root, ``--out
    /dev/null`` left a regular file in /dev)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Context manager yielding a binary handle on a temporary file next to ``path``; on
    a normal exit the file is flushed, fsync'd and renamed over ``path`` (then the
    folder is fsync'd); on an exception it is removed and ``path`` is left untouched.

    The new file gets the permissions a plain ``open(path, "w")`` would give (0666 less
    the umask), not ``mkstemp``'s 0600.  A symbolic link is followed (its target is
    replaced).  ``/dev/stdout`` and other names of an open descriptor are written through
    that descriptor (:func:`_open_descriptor`), and a device or a FIFO in place
    (:func:`_written_in_place`): neither can be renamed over.
    """
    given = os.fspath(path)
    descriptor_number = _open_descriptor(given)
    if descriptor_number is not None:  # /dev/stdout: through the open descriptor, at its offset
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with os.fdopen(os.dup(descriptor_number), "wb") as handle:
            yield handle
        return
    if _written_in_place(given):  # /dev/null, a FIFO, a device
        with open(given, "wb") as handle:
            yield handle
        return
    # a symbolic link is followed, so the file it names is replaced, not the link
    destination = os.path.realpath(given)
    folder, name = os.path.split(destination)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        with contextlib.suppress(OSError):  # pragma: no cover - e.g. file systems without modes
            os.fchmod(descriptor, 0o666 & ~umask)
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, destination)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_directory(folder)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename, fsync folder)."""
    with atomic_writer(path) as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically, encoded with ``encoding`` (UTF-8 by default;
    newlines are written as given, never translated)."""
    atomic_write_bytes(path, text.encode(encoding))


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(handle)`` on a binary handle and publish the result atomically at
    ``path`` (for writers that want a file object: ``torch.save``, ``savefig``)."""
    with atomic_writer(path) as handle:
        write(handle)


__all__.append("atomic_write_with")
