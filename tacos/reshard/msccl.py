"""Which resharding plans MSCCL can run, and the plan relabelled as that collective.

The MSCCL runtime runs a plan only from one of NCCL's collective calls -- all-gather,
reduce-scatter, all-reduce, all-to-all, broadcast, reduce -- on every rank of one communicator,
with that call's fixed buffer layout (``docs/msccl.md``).  A cross-mesh resharding in general
is none of them: ranks of the source mesh have inputs and no outputs, ranks of the destination
mesh the opposite, tiles differ in size and in who holds them.  Two shapes are expressible:

* **broadcast** -- every tile goes from one device to the same receivers and the plan sends
  from that device only (one source device, a replicated destination: seed 001's
  single-device-to-mesh case); the communicator is the root plus the receivers;
* **all-gather** -- the source and destination meshes are the same devices and every device
  contributes equal tiles that every other device needs (``S0 -> R`` within one mesh).

:func:`standard_form` returns the plan as that collective (same transfers), or raises a
:class:`~tacos.errors.TacosError` that says why the runtime cannot run it and points to the JSON
schedule, which keeps every transfer with its route and which ``tacosc verify`` checks.
"""

from __future__ import annotations

from tacos.errors import TacosError
from tacos.model.patterns import build
from tacos.model.schedule import Schedule, Transfer

JSON_HINT = ("write the JSON schedule instead (-o plan.json): it keeps every transfer with "
             "its physical route, and `tacosc verify plan.json` checks it")


def _refuse(why: str) -> TacosError:
    return TacosError(f"MSCCL XML cannot express this resharding plan: {why}", hint=JSON_HINT)


def standard_form(schedule: Schedule) -> Schedule:
    """``schedule`` as a broadcast or all-gather over the devices it uses (see the module
    docstring); :class:`TacosError` when the runtime cannot run it."""
    coll = schedule.collective
    chunks = coll.chunks
    if coll.kind in ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast",
                     "reduce"):
        return schedule
    if not chunks:
        raise _refuse("it moves nothing")
    if coll.kind == "multi":
        raise _refuse("it reshards several tensors at once; MSCCL runs one collective call "
                      "per plan")
    if any(c.reduce for c in chunks):
        raise _refuse("it combines values")
    sizes = {c.size for c in chunks}
    if len(sizes) != 1:
        raise _refuse(f"its pieces have {len(sizes)} different sizes ({min(sizes)} to "
                      f"{max(sizes)} bytes); MSCCL chunks are all alike")
    got = _as_broadcast(schedule) or _as_allgather(schedule)
    if got is not None:
        return got
    senders = {u for c in chunks for u in c.pre}
    receivers = {v for c in chunks for v in c.post - c.pre}
    raise _refuse(
        f"it moves {len({(c.pre, c.post) for c in chunks})} kinds of tile from "
        f"{len(senders)} source device(s) to {len(receivers)} destination device(s), each "
        "device with its own tiles; the runtime only runs all-gather, reduce-scatter, "
        "all-reduce, all-to-all, broadcast and reduce, each with its fixed buffer layout on "
        "every rank")


def _sources(schedule: Schedule) -> set[int]:
    """NPUs that send a chunk they started with."""
    pre = {c.id: c.pre for c in schedule.collective.chunks}
    return {t.src for t in schedule.transfers for c in t.chunks if t.src in pre[c]}


def _used(schedule: Schedule) -> set[int]:
    return {v for t in schedule.transfers for v in (t.src, t.dst)}


def _as_broadcast(schedule: Schedule) -> Schedule | None:
    chunks = schedule.collective.chunks
    posts = {c.post for c in chunks}
    roots = _sources(schedule)
    if len(posts) != 1 or len(roots) != 1:
        return None
    (root,) = roots
    (post,) = posts
    group = [root] + sorted(post - {root})
    if not _used(schedule) <= set(group):
        raise _refuse("it relays through devices that are neither the source nor a receiver, "
                      "which an MSCCL broadcast cannot use")
    k = len(chunks)
    coll = build("broadcast", group, size=k * chunks[0].size, chunks_per_npu=k, root=root,
                 name=schedule.collective.name)
    return Schedule(schedule.topology, coll, schedule.transfers, dict(schedule.meta))


def _as_allgather(schedule: Schedule) -> Schedule | None:
    coll = schedule.collective
    chunks = coll.chunks
    everyone = frozenset(coll.group)
    if any(len(c.pre) != 1 or (c.pre | c.post) != everyone for c in chunks):
        return None
    by_src: dict[int, list[int]] = {v: [] for v in coll.group}
    for c in chunks:
        (u,) = c.pre
        by_src[u].append(c.id)
    counts = {len(ids) for ids in by_src.values()}
    if len(counts) != 1 or 0 in counts:
        return None
    k = counts.pop()
    if not _used(schedule) <= everyone:
        raise _refuse("it relays through devices outside the mesh")
    new_id = {cid: pos * k + j for pos, v in enumerate(coll.group)
              for j, cid in enumerate(by_src[v])}
    ag = build("allgather", coll.group, size=len(chunks) * chunks[0].size, chunks_per_npu=k,
               name=coll.name)
    transfers = tuple(sorted(Transfer(t.start, t.end, t.src, t.dst, t.route,
                                      tuple(sorted(new_id[c] for c in t.chunks)), t.op)
                             for t in schedule.transfers))
    return Schedule(schedule.topology, ag, transfers, dict(schedule.meta))


__all__ = ["JSON_HINT", "standard_form"]
