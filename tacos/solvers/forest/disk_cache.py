"""The forest's costly packings remembered on disk, per topology shape, across processes.

Two parts of a ``forest`` solve are deterministic functions of a topology's shape that cost
seconds and do not depend on the collective's size: the step-timed integer program
(:func:`~tacos.solvers.forest.timed_links._solve`, one CP-SAT worker with deterministic time
limits: 2x MI250's takes 4-5 s of CPU) and the Lovász tree packing
(:func:`~tacos.solvers.forest.pack.pack_trees`: 2x MI250's two packings at k = 9 take 2 s).
:mod:`~tacos.solvers.forest.memo` keeps them within one process; this module keeps them on disk,
as :mod:`tacos.solvers.nccl.search_cache` does NCCL's ring search, so a second compile of the
same shape (another size, the other collective, the next run) reads them back.

Each answer is a small JSON file named by a SHA-256 of everything it depends on: the inputs
*in the order given* (the program's variables and the packer's choices follow that order, so
the same inputs in another order are another file, never a wrong answer), the source of the
modules that compute it (an edit never reads an older answer), the OR-Tools version (CP-SAT's
search and its deterministic time are the solver's own) and Python's version.  A file that
cannot be read, does not parse or does not have the answer's shape is ignored and the answer
computed again; one that cannot be written is not written.  A packing is stored only when it
took at least :data:`PACK_MIN_TESTS` max-flow tests (small ones are cheaper to redo than to
read).

Where: sub-folder ``forest`` of ``$TACOS_CACHE_DIR`` when set (empty: no cache), else of the
user cache folder (``~/.cache/tacos``), as for NCCL's ring search.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

FORMAT = 1
_SOURCES = {
    "timed": ("timed_links.py",),
    "pack": ("pack.py", "flow.py", "split.py"),
}
"""Modules whose code decides each kind of answer (their source is part of the key)."""
PACK_MIN_TESTS = 2000
"""Fewest max-flow tests of a Lovász packing worth storing (2x MI250 at k = 9: about 11,000,
1 s of CPU; at k = 1 and 2: a few hundred, 0.05 s)."""


def cache_dir() -> Path | None:
    """The folder answers are kept in, None when the cache is off: ``forest`` next to NCCL's
    ring search (:func:`tacos.solvers.nccl.search_cache.cache_dir`: ``$TACOS_CACHE_DIR`` when
    set, empty: off, else the user cache folder)."""
    from tacos.solvers.nccl.search_cache import cache_dir as rings_dir

    rings = rings_dir()
    return None if rings is None else rings.parent / "forest"


@cache
def _code_hash(kind: str) -> str:
    """SHA-256 of the source of ``kind``'s modules and of the OR-Tools version."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _SOURCES[kind]:
        digest.update((here / name).read_bytes())
    try:
        from importlib.metadata import version

        digest.update(version("ortools").encode())
    except Exception:  # noqa: BLE001 - no OR-Tools: networkx flows, no CP-SAT
        digest.update(b"no ortools")
    return digest.hexdigest()


def key_of(kind: str, inputs: Any) -> str:
    """The file name (hex SHA-256) of ``kind``'s answer for the JSON-able ``inputs``."""
    text = json.dumps([FORMAT, kind, _code_hash(kind), list(sys.version_info[:2]), inputs],
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def remembered(kind: str, inputs: Any, compute: Callable[[], Any],
               encode: Callable[[Any], Any], decode: Callable[[Any], Any],
               keep: Callable[[Any], bool] = lambda _: True) -> Any:
    """What ``compute()`` gives for ``inputs`` (which must determine it), read from the cache
    when there, else computed and, when ``keep(answer)``, stored.  ``encode`` turns an answer
    into JSON-able data; ``decode`` turns that back, raising ``ValueError`` (or ``TypeError``,
    ``KeyError``) on data of the wrong shape, which is then computed again."""
    from tacos.solvers.nccl.search_cache import store_json

    folder = cache_dir()
    if folder is None:
        return compute()
    try:
        path = folder / f"{key_of(kind, inputs)}.json"
    except (TypeError, ValueError):  # inputs JSON cannot hold (a foreign number type): no cache
        return compute()
    try:
        return decode(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        pass
    answer = compute()
    if not keep(answer):
        return answer
    store_json(path, encode(answer))
    return answer


def ints(value: Any, n: int | None = None) -> list[int]:
    """``value`` as a list of ints (of length ``n`` when given); ValueError otherwise."""
    if not isinstance(value, list) or not all(type(x) is int for x in value) \
            or n is not None and len(value) != n:
        raise ValueError("not a list of integers")
    return value
