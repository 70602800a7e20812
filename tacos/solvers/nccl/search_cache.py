"""NCCL's ring search, remembered on disk across processes.

NCCL itself can save the result of its topology search and load it instead of searching
again (``NCCL_GRAPH_DUMP_FILE`` / ``NCCL_GRAPH_FILE``).  tacos's ring search
(:func:`tacos.solvers.nccl.rings.intra_rings`) is a deterministic function of the lanes it
searches, the members, the seed and the channel limit, and of its own code; on a 4x4x4 torus it
takes most of a second (most of its 37 depth-first searches exhaust their step budget), which
every default compile of the same topology used to pay again.

:func:`remembered_rings` keeps each answer in a small JSON file named by a SHA-256 of everything
the answer depends on: the inputs, the source of the modules that compute it (so an edit of the
search never reads an older answer) and Python's version (whose ``random`` draws it).  A file
that cannot be read, does not parse or does not have the answer's shape is ignored and the
answer computed again; one that cannot be written is not written.  A search that finds no ring
is an answer too (the same inputs and code never find one): it is stored as its error's
message and hint and raised again when read (on a 16x16x16 torus that failed search took
29 s of every default compile).

Where: sub-folder ``nccl-rings`` of ``$TACOS_CACHE_DIR`` when set (empty: no cache), else of
the user cache folder (``~/.cache/tacos``), as for the TDL parser's cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

#: modules whose code decides a ring search's answer (their source is part of the key)
_SOURCES = ("rings.py", "../lowering/hops.py", "ring_search_jit.py",
            "ring_search_kernel.py")
FORMAT = 1


def cache_dir() -> Path | None:
    """The folder answers are kept in, None when the cache is off: as for the TDL parser
    (``frontends.tdl_parser.grammar_cache_file``), ``$TACOS_CACHE_DIR`` when set (empty: off),
    else the user cache folder (``~/.cache/tacos``)."""
    folder = os.environ.get("TACOS_CACHE_DIR")
    if folder is None:
        try:
            import platformdirs

            folder = platformdirs.user_cache_dir("tacos", appauthor=False)
        except Exception:  # noqa: BLE001 - no cache folder: search each time
            return None
    return Path(folder) / "nccl-rings" if folder else None


@cache
def _code_hash() -> str:
    """SHA-256 of the searching modules' source."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update((here / name).read_bytes())
    return digest.hexdigest()


def key_of(kind: str, inputs: Any) -> str:
    """The file name (hex SHA-256) of ``kind``'s answer for the JSON-able ``inputs``."""
    text = json.dumps([FORMAT, kind, _code_hash(), list(sys.version_info[:2]), inputs],
                      sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _is_rings(value: Any, members: list[int]) -> bool:
    """Whether ``value`` has the shape of a ring search's answer over ``members``."""
    want = sorted(members)
    return isinstance(value, list) and bool(value) and all(
        isinstance(r, list) and all(isinstance(x, int) for x in r) and sorted(r) == want
        for r in value)


def _is_no_ring(value: Any) -> bool:
    """Whether ``value`` has the shape of a stored "no ring found" answer."""
    return isinstance(value, dict) and set(value) == {"no_ring", "hint"} and \
        isinstance(value["no_ring"], str) and isinstance(value["hint"], (str, type(None)))


def remembered_rings(inputs: dict[str, Any], members: list[int],
                     compute: Callable[[], list[list[int]]]) -> list[list[int]]:
    """The rings ``compute()`` gives for ``inputs`` (which must determine them), read from the
    cache when there, else computed and stored (see module doc).  When ``compute()`` raises a
    :class:`~tacos.errors.TacosError` (no ring found), that answer is stored and raised again
    on every later read."""
    from tacos.errors import TacosError

    folder = cache_dir()
    if folder is None:
        return compute()
    path = folder / f"{key_of('intra_rings', inputs)}.json"
    got: Any = None
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    if _is_rings(got, members):
        return got
    if _is_no_ring(got):
        raise TacosError(got["no_ring"], hint=got["hint"])
    try:
        rings = compute()
    except TacosError as exc:
        store_json(path, {"no_ring": exc.message, "hint": exc.hint})
        raise
    store_json(path, rings)
    return rings


def store_json(path: Path, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` atomically (:func:`tacos.atomic.write_text`: a reader
    sees the whole file or none), making its folder; nothing when it cannot be written (a cache
    that cannot be written is not written)."""
    from tacos.atomic import write_text
    from tacos.errors import TacosError

    text = json.dumps(value, separators=(",", ":"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
    except (OSError, TacosError):
        pass
