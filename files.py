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
import stat
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


def _is_special(path: str) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder (a device, a
    FIFO, a socket): renaming a file over it would replace the node itself (as root,
    ``--out /dev/null`` left a regular file in /dev)."""
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
    replaced); a device or a FIFO (``/dev/null``, ``/dev/stdout``) is written in place,
    since it cannot be renamed over.
    """
    # a symbolic link is followed, so the file it names is replaced, not the link
    destination = os.path.realpath(os.fspath(path))
    if _is_special(destination):  # /dev/null, /dev/stdout, a FIFO: written in place
        with open(destination, "wb") as stream:
            yield stream
        return
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
