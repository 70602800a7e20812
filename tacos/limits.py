"""Documented limits on input size and work, and the ranges numbers must fall in.

Every size, count, range, multiplicity, nesting depth, include fan-out and generated element
count a user can write is checked against a :class:`Limits` field *before* work proportional to
it is done, so no input can make tacos run for hours or exhaust memory by accident.  The
defaults are generous for real systems (``docs/tdl.md``, "Limits"); a user who needs more raises
one for a block of code or one command::

    with tacos.limits.raised(links=10_000_000):
        spec = tacos.load("big.tdl")

    tacosc big.tdl --limit links=10000000 ...

Numbers (bandwidth, latency, sizes) must be finite and inside :data:`RANGES` wherever they
enter (TDL, CLI, API, JSON); :func:`check_number` says why one is not.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from tacos.errors import TacosError

if TYPE_CHECKING:
    from tacos.collective import Collective
    from tacos.topology import Topology


@dataclass(frozen=True)
class Limits:
    """The limits in force (see ``docs/tdl.md``, "Limits", for what each one bounds)."""

    nodes: int = 1_000_000
    """NPUs plus switches a TDL file may declare (generators and instances included)."""
    links: int = 2_000_000
    """Directed links a TDL file may declare, and links switch unwinding may create."""
    loop_iterations: int = 2_000_000
    """Loop iterations a TDL file may run, all loops and included files together."""
    multiplicity: int = 1024
    """Parallel links one link statement may declare (``xN``)."""
    nesting: int = 100
    """Depth of nested blocks, brackets and parentheses in TDL, and of arrays/objects in JSON."""
    includes: int = 100_000
    """File instances ``use`` may create, all ``use`` statements together."""
    include_depth: int = 16
    """How deeply files may ``use`` each other."""
    chunks: int = 1_000_000
    """Chunks one collective may have (all tenants together)."""
    deliveries: int = 100_000_000
    """Chunk arrivals one collective may demand: the sum over chunks of their destinations."""
    tdl_bytes: int = 8 * 2**20
    """Size of one TDL file."""
    schedule_bytes: int = 2**30
    """Size of a JSON schedule file read by ``tacosc verify``."""
    xml_bytes: int = 256 * 2**20
    """Size of an MSCCL XML file read by ``tacosc verify``."""


DEFAULT = Limits()
LIMIT_NAMES = tuple(f.name for f in fields(Limits))
_CURRENT: ContextVar[Limits] = ContextVar("tacos_limits", default=DEFAULT)

RANGES: dict[str, tuple[float, float, str]] = {
    "bandwidth": (1.0, 1e15, "1 B/s to 1 PB/s"),
    "latency": (0.0, 1e6, "0 to 1e6 s"),
    "size": (1.0, float(2**50), "1 B to 1 PiB"),
    "time_limit": (1e-3, 1e6, "0.001 to 1e6 s"),
}
"""What a quantity may be: (lowest, highest, the same in words); both ends included."""

MAX_INTEGER = 2**53
"""Largest magnitude an integer may have anywhere (TDL expressions, JSON, XML values)."""


class LimitError(TacosError):
    """An input asks for more than a documented limit allows."""


def current() -> Limits:
    """The limits in force in this context."""
    return _CURRENT.get()


@contextmanager
def raised(**changes: int) -> Iterator[Limits]:
    """Use other limits inside a ``with`` block (e.g. ``raised(links=10_000_000)``)."""
    limits = with_changes(current(), changes)
    token = _CURRENT.set(limits)
    try:
        yield limits
    finally:
        _CURRENT.reset(token)


def with_changes(base: Limits, changes: dict[str, int]) -> Limits:
    """``base`` with some fields changed; unknown names and values below 1 are refused."""
    for name, value in changes.items():
        if name not in LIMIT_NAMES:
            import difflib

            close = difflib.get_close_matches(name, LIMIT_NAMES, n=1)
            raise TacosError(f"unknown limit {name!r}",
                             hint=f"did you mean '{close[0]}'?" if close
                             else f"limits: {', '.join(LIMIT_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TacosError(f"limit {name} must be a positive whole number, not {value!r}")
    return replace(base, **changes)


def set_current(limits: Limits) -> None:
    """Make ``limits`` the limits of this context (the CLI sets them once per command)."""
    _CURRENT.set(limits)


def exceeded(name: str, amount: int, what: str) -> LimitError:
    """The error for ``amount`` over limit ``name`` (``what`` says what was counted)."""
    limit = getattr(current(), name)
    return LimitError(f"{what}: {amount:,} exceeds the limit of {limit:,} ({name})",
                      hint=f"if this is intended, raise it: tacosc ... --limit {name}={amount}"
                      f"  or  with tacos.limits.raised({name}={amount}): ...")


def check(name: str, amount: int, what: str) -> None:
    """Raise :class:`LimitError` when ``amount`` is over limit ``name``."""
    if amount > getattr(current(), name):
        raise exceeded(name, amount, what)


def check_number(kind: str, value: float) -> str | None:
    """Why ``value`` cannot be a ``kind`` (a key of :data:`RANGES`), or None when it can."""
    lo, hi, words = RANGES[kind]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"a {kind.replace('_', ' ')} must be a number"
    if not math.isfinite(value):
        return f"a {kind.replace('_', ' ')} must be a finite number, not {value}"
    if not lo <= value <= hi:
        return f"a {kind.replace('_', ' ')} of {value:g} is out of range ({words})"
    return None


def require_number(kind: str, value: float, where: str = "") -> float:
    """``value`` if it is a valid ``kind``, else a :class:`TacosError` (``where`` prefixes)."""
    problem = check_number(kind, value)
    if problem is not None:
        raise TacosError(f"{where}{problem}")
    return value


def check_collective(collective: Collective) -> None:
    """Chunk count, demanded deliveries and chunk sizes are within limits and ranges."""
    check("chunks", collective.n_chunks, f"collective {collective.name or collective.kind} "
          "has too many chunks")
    check("deliveries", sum(len(c.post) for c in collective.chunks),
          f"collective {collective.name or collective.kind} demands too many chunk arrivals")
    lo, hi, _ = RANGES["size"]
    bad = [c for c in collective.chunks if not lo <= c.size <= hi]
    if bad:
        raise TacosError(f"chunk {bad[0].id}: {check_number('size', bad[0].size)}")


def unwound_link_count(topology: Topology) -> int:
    """Links (and switch-pair distances) switch unwinding will produce, without building them.

    Per fabric of n attached NPUs: ``full`` gives n(n-1) links, ``degree(d)`` n·min(d, n-1),
    ``ring``/``biring``/``stride`` at most 2n; a fabric of s > 1 switches also needs s² switch
    distances.
    """
    from tacos.passes.unwind import fabrics

    if not topology.switches:
        return len(topology.links)
    total = sum(1 for lk in topology.links
                if not (topology.is_switch(lk.src) or topology.is_switch(lk.dst)))
    for fabric in fabrics(topology):
        attached = set()
        for sw in fabric:
            attached.update(topology.links[i].src for i in topology.in_links[sw])
            attached.update(topology.links[i].dst for i in topology.out_links[sw])
        n = len(attached - set(fabric))
        first = topology.switches[fabric[0] - topology.n_npus]
        if first.policy == "full":
            total += n * (n - 1)
        elif first.policy == "degree":
            total += n * min(max(n - 1, 0), first.degree or 1)
        else:
            total += 2 * n
        if len(fabric) > 1:
            total += len(fabric) ** 2
    return total


def check_problem(topology: Topology, collective: Collective) -> None:
    """The limits synthesis needs to hold before it starts work (the API's entry check; link
    values are checked by :func:`tacos.passes.validate.check_topology`); errors are located
    at the statement responsible (:mod:`tacos.limit_spans`)."""
    from tacos.limit_spans import locate_group, locate_links

    try:
        check_collective(collective)
    except LimitError as exc:
        raise locate_group(exc, topology, collective.group, collective) from None
    try:
        check("links", unwound_link_count(topology), "switch unwinding would create too many "
              "links (a fully unwound switch of n ports gives n(n-1))")
    except LimitError as exc:
        raise locate_links(exc, topology) from None


def check_deliveries_of(kind: str, n: int, chunks_per_npu: int) -> None:
    """Limit checks for a standard collective *before* its chunks are built."""
    per = n * n if kind == "alltoall" else n
    chunks = per * chunks_per_npu if kind not in ("broadcast", "reduce") else chunks_per_npu
    check("chunks", chunks, f"{kind} on {n} NPUs with {chunks_per_npu} chunks per NPU has "
          "too many chunks")
    arrivals = chunks * (n if kind in ("allgather", "allreduce", "broadcast") else 1)
    check("deliveries", arrivals, f"{kind} on {n} NPUs with {chunks_per_npu} chunks per NPU "
          "demands too many chunk arrivals")
