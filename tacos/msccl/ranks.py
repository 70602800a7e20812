"""Which NPU of a topology runs each rank of an MSCCL plan.

An MSCCL program numbers its GPUs ``0 .. ngpus-1`` in the communicator's rank order; tacos
emits a process group's plan in the group's own numbering (rank r = the r-th NPU of
``collective.group``, contiguous or not).  To time or check such a plan on the whole topology,
the ranks must be mapped back to NPUs.  :func:`resolve_ranks` takes the first of:

1. an explicit list (``tacosc verify --ranks gpu[0],gpu[2],...``: NPU names or ids in rank
   order);
2. the plan's own ``<!-- tacos ranks: 0 2 5 7 -->`` comment, which tacos writes before
   ``<algo>`` whenever the group is not NPUs ``0 .. n-1`` in order (the runtime's parser skips
   comments there, as in the production files' licence headers; ``docs/msccl.md``);
3. the one group of the topology file's declared collectives that has ``ngpus`` NPUs;
4. rank r = NPU r, when the topology has exactly ``ngpus`` NPUs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from tacos.errors import TacosError, UsageError
from tacos.model.topology import Topology

_COMMENT = re.compile(r"<!--\s*tacos ranks:([^>]*?)-->")


def ranks_comment(group: Sequence[int]) -> str:
    """The comment line recording ``group`` (NPU ids in rank order), '' for ``0 .. n-1``."""
    if list(group) == list(range(len(group))):
        return ""
    return "<!-- tacos ranks: " + " ".join(str(v) for v in group) + " -->\n"


def declared_ranks(text: str) -> tuple[int, ...] | None:
    """The NPU ids of a ``tacos ranks`` comment before ``<algo>``, or None.

    Raises :class:`~tacos.errors.TacosError` when the comment is there but unreadable.
    """
    head = text.split("<algo", 1)[0]
    m = _COMMENT.search(head)
    if m is None:
        return None
    words = m.group(1).split()
    if not words or not all(w.isdigit() for w in words):
        raise TacosError(f"the plan's 'tacos ranks' comment is not a list of NPU ids: "
                         f"{m.group(0)!r}", hint="write NPU ids separated by spaces, "
                         "or remove the comment and pass --ranks")
    return tuple(int(w) for w in words)


def parse_ranks(text: str, topology: Topology) -> tuple[int, ...]:
    """``gpu[0],gpu[2],5`` (NPU names or ids, comma-separated) → NPU ids."""
    names = {n.name: n.id for n in topology.npus}
    out = []
    for item in (w.strip() for w in text.split(",")):
        if item in names:
            out.append(names[item])
        elif item.isdigit() and int(item) < topology.n_npus:
            out.append(int(item))
        else:
            raise UsageError(f"--ranks: {item!r} is not an NPU of the topology",
                             hint="list NPU names or ids in rank order, separated by commas, "
                                  "e.g. --ranks gpu[0],gpu[2]")
    return tuple(out)


def resolve_ranks(topology: Topology, ngpus: int, *, explicit: Sequence[int] | None = None,
                  embedded: Sequence[int] | None = None,
                  declared: Iterable[Sequence[int]] = ()) -> tuple[tuple[int, ...], str]:
    """NPU ids of ranks ``0 .. ngpus-1`` and where the mapping came from (module docstring).

    Raises :class:`~tacos.errors.TacosError` when no source gives a mapping or the mapping does
    not fit the topology.
    """
    if explicit is not None:
        ranks, source = tuple(explicit), "--ranks"
    elif embedded is not None:
        ranks, source = tuple(embedded), "the plan's 'tacos ranks' comment"
    else:
        fits = sorted({tuple(g) for g in declared if len(g) == ngpus})
        if len(fits) == 1:
            ranks, source = fits[0], "the group of the collective declared in the topology file"
        elif topology.n_npus == ngpus:
            ranks, source = tuple(range(ngpus)), "rank r = NPU r"
        else:
            raise TacosError(
                f"the plan has {ngpus} ranks but the topology has {topology.n_npus} NPUs, and "
                "nothing says which NPU runs which rank",
                hint="pass --ranks with the group's NPUs in rank order (e.g. --ranks "
                     "gpu[0],gpu[2],...), or declare the collective with its group in the "
                     "topology file")
    if len(ranks) != ngpus:
        raise TacosError(f"{source} names {len(ranks)} NPUs but the plan has {ngpus} ranks",
                         hint="list one NPU per rank, in rank order")
    if len(set(ranks)) != len(ranks):
        raise TacosError(f"{source} names an NPU twice: {list(ranks)}",
                         hint="each rank runs on its own NPU")
    for r, v in enumerate(ranks):
        if not 0 <= v < topology.n_npus:
            raise TacosError(f"{source}: rank {r} is NPU {v}, which the topology does not have "
                             f"(it has {topology.n_npus} NPUs)",
                             hint="time the plan on the topology it was made for")
        if topology.npus[v].failed:
            raise TacosError(f"{source}: rank {r} is NPU {topology.npus[v].name}, which has "
                             "failed in this topology",
                             hint="leave failed NPUs out of the group")
    return ranks, source
