"""Atomic file output: a file tacos writes is either the old one or the complete new one.

Data goes to a temporary file in the destination's folder (same file system), is flushed to
disk, and replaces the destination with :func:`os.replace`, which is atomic.  Whatever happens
in between (a full disk, a file-size limit, an interrupt), the previous file is untouched and
the temporary file is removed.  :func:`check_writable` tells, before any work is done, whether
a path can be written at all.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tacos.errors import TacosError


def _error(path: Path, exc: OSError) -> TacosError:
    return TacosError(f"cannot write {path}: {exc.strerror or exc}",
                      hint="check that the folder exists, is writable and has space")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write to; on success it replaces ``path`` atomically.

    For writers that insist on a file name (``matplotlib.savefig``).  The temporary name keeps
    ``path``'s suffix so that format detection by suffix still works.
    """
    dest = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=f".tmp{dest.suffix}",
                                   dir=dest.parent if str(dest.parent) else ".")
    except OSError as exc:
        raise _error(dest, exc) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        _fsync(tmp_path)
        _keep_mode(dest, tmp_path)
        os.replace(tmp_path, dest)
    except OSError as exc:
        raise _error(dest, exc) from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        try:
            with open(tmp, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise _error(Path(path), exc) from None


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    write_bytes(path, text.encode(encoding))


def write_with(path: str | Path, writer: Callable[[Path], object]) -> None:
    """Call ``writer(tmp_path)`` and move the result to ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)


def check_writable(path: str | Path, what: str = "output") -> None:
    """Raise a :class:`TacosError` now if ``path`` cannot be written later.

    The folder must exist and be writable (a temporary file is created and removed), and
    ``path`` must not be a folder.
    """
    dest = Path(path)
    folder = dest.parent if str(dest.parent) else Path(".")
    if dest.is_dir():
        raise TacosError(f"cannot write {dest}: it is a folder (the {what} must be a file)")
    if not folder.is_dir():
        raise TacosError(f"cannot write {dest}: folder {folder} does not exist",
                         hint=f"create the folder first, or write the {what} somewhere else")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".check", dir=folder)
    except OSError as exc:
        raise TacosError(f"cannot write {dest}: {exc.strerror or exc}",
                         hint=f"check that the folder of the {what} is writable") from None
    os.close(fd)
    os.unlink(tmp)


def _fsync(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _keep_mode(dest: Path, tmp: Path) -> None:
    """Give the new file the old file's permissions, or the usual ones (umask applied)."""
    try:
        mode = dest.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.chmod(tmp, mode)
