"""What users run today for cross-mesh resharding, timed on the physical machine model.

* :func:`send_recv` -- Alpa's send/recv resharding: every receiver device gets each tile it
  needs by one point-to-point send from the replica with the least load so far (Alpa's greedy
  load balance), in Alpa's order (destination tile by destination tile).  With
  ``local_allgather=True`` (what Alpa runs by default, the seed's "Alpa" baseline) each
  receiver host gets the tile once, in slices, one slice per receiver device, and the host's
  receivers all-gather the slices over their local links.  Each device issues its sends and
  receives one after the other (NCCL point-to-point on one stream).
* :func:`seed_broadcast` -- the seed's broadcast-based resharding: one pipelined ring
  broadcast per unit task from a replica to all receivers (grouped by host), senders and order
  from the seed's load balancing (:mod:`tacos.reshard.loadbalance`); a task starts when all
  its hosts are free.

Both return a schedule of the same collective the planner solves (the reshard's tiles in
``pieces`` chunks), verified like every other plan.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.reshard import loadbalance as lb
from tacos.reshard.hosts import hosts as host_of
from tacos.reshard.tasks import Reshard, UnitTask, reshard_collective, task_chunks
from tacos.reshard.timeline import Timeline


def _position(reshards: Sequence[Reshard]) -> dict[int, int]:
    pos: dict[int, int] = {}
    for r in reshards:
        for dev in (*r.src.devices, *r.dst.devices):
            pos.setdefault(dev, len(pos))
    return pos


def _alpa_order(items: list[tuple[UnitTask, tuple[int, ...]]], pos: dict[int, int]):
    """Destination tile by destination tile, then source tile (Alpa's loop order)."""
    return sorted(items, key=lambda it: (min(pos[v] for v in it[0].receivers),
                                         min(pos[u] for u in it[0].senders), it[0].index))


def send_recv(topology: Topology, reshards: Reshard | Sequence[Reshard], pieces: int = 1, *,
              local_allgather: bool = False) -> Schedule:
    """Alpa's send/recv resharding (see the module docstring)."""
    rs = [reshards] if isinstance(reshards, Reshard) else list(reshards)
    coll = reshard_collective(rs, pieces)
    pos = _position(rs)
    host = host_of(topology, pos)
    tl = Timeline(topology, coll)
    load: dict[int, int] = defaultdict(int)
    sizes = coll.chunks

    def sender_for(task: UnitTask) -> int:
        return min(task.senders, key=lambda u: (load[u], pos[u]))

    for task, ids in _alpa_order(task_chunks(rs, pieces), pos):
        receivers = sorted(task.receivers, key=pos.__getitem__)
        if not local_allgather:
            for v in receivers:
                u = sender_for(task)
                load[u] += task.nbytes
                tl.send(u, v, ids, streams=True, pipelined=True)
            continue
        by_host: dict[str, list[int]] = defaultdict(list)
        for v in receivers:
            by_host[host[v]].append(v)
        for members in by_host.values():
            m = len(members)
            slices = [ids[i * len(ids) // m:(i + 1) * len(ids) // m] for i in range(m)]
            for v, part in zip(members, slices, strict=True):
                if part:
                    u = sender_for(task)
                    load[u] += sum(sizes[c].size for c in part)
                    tl.send(u, v, part, streams=True, pipelined=True)
            for step in range(m - 1):  # ring all-gather of the slices
                for i, v in enumerate(members):
                    part = slices[(i - step) % m]
                    if part:
                        tl.send(v, members[(i + 1) % m], part, streams=True, pipelined=True)
    algo = "send/recv + local all-gather (Alpa)" if local_allgather else "send/recv"
    return tl.schedule({"solver": "alpa" if local_allgather else "sendrecv",
                        "algorithm": algo, "pieces": pieces})


def host_tasks(topology: Topology, items: list[tuple[UnitTask, tuple[int, ...]]],
               host: dict[int, str]) -> list[lb.HostTask]:
    """The unit tasks at host level; a task's duration is its bytes over the slowest route
    bandwidth between its sender and receiver hosts (the host interface)."""
    routing = topology.routing
    out = []
    for i, (task, _) in enumerate(items):
        senders = tuple(dict.fromkeys(host[u] for u in task.senders))
        receivers = frozenset(host[v] for v in task.receivers)
        bw = float("inf")
        for v in task.receivers:
            best = max((r.bandwidth for u in task.senders for r in routing.routes(u, v)),
                       default=None)
            if best is not None:
                bw = min(bw, best)
        if bw == float("inf"):  # no single route: take the slowest link as the interface
            bw = min(lk.bandwidth for lk in topology.links)
        out.append(lb.HostTask(i, senders, receivers, task.nbytes / bw))
    return out


def seed_broadcast(topology: Topology, reshards: Reshard | Sequence[Reshard],
                   pieces: int = 1, *, algorithm: str = "seed", seed: int = 0) -> Schedule:
    """The seed's broadcast-based resharding.  ``algorithm``: ``'seed'`` (DFS + randomized
    greedy, the paper's), ``'load_balance'`` or ``'naive'``."""
    rs = [reshards] if isinstance(reshards, Reshard) else list(reshards)
    coll = reshard_collective(rs, pieces)
    pos = _position(rs)
    host = host_of(topology, pos)
    items = task_chunks(rs, pieces)
    htasks = host_tasks(topology, items, host)
    if algorithm == "naive":
        plan = lb.naive(htasks)
    elif algorithm == "load_balance":
        plan = lb.load_balance_only(htasks)
    elif algorithm == "seed":
        plan = lb.seed_schedule(htasks, seed=seed)
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}")
    tl = Timeline(topology, coll)
    free: dict[str, float] = defaultdict(float)
    dev_load: dict[int, int] = defaultdict(int)
    for i in plan.order:
        task, ids = items[i]
        src_host = plan.sender[i]
        cands = [u for u in task.senders if host[u] == src_host]
        u = cands[0] if algorithm == "naive" else min(cands, key=lambda d: (dev_load[d], pos[d]))
        dev_load[u] += task.nbytes
        ring = [u] + _ring_receivers(task, host, pos, src_host)
        hosts_used = {host[v] for v in ring}
        start = max(free[h] for h in hosts_used)
        end = _ring_broadcast(tl, ring, ids, start)
        for h in hosts_used:
            free[h] = end
    return tl.schedule({"solver": "broadcast", "pieces": pieces,
                        "algorithm": f"seed broadcast ({plan.algorithm})",
                        "host_estimate": plan.makespan})


def _ring_receivers(task: UnitTask, host: dict[int, str], pos: dict[int, int],
                    first: str) -> list[int]:
    """Receivers host by host (the sender's host first), so the ring crosses each host
    boundary once."""
    order = sorted(task.receivers, key=lambda v: (host[v] != first, host[v], pos[v]))
    return order


def _ring_broadcast(tl: Timeline, ring: list[int], ids: tuple[int, ...], start: float) -> float:
    """Pipelined ring broadcast: piece j goes round the ring, each hop once the piece has
    arrived; returns when the last piece reaches the last receiver."""
    end = start
    for c in ids:
        for a, b in zip(ring, ring[1:], strict=False):
            end = max(end, tl.send(a, b, (c,), not_before=start))
    return end


def plans(topology: Topology, reshards: Sequence[Reshard], pieces: int, *, seed: int = 0
          ) -> dict[str, Schedule]:
    """The baselines by name: ``sendrecv``, ``alpa``, ``broadcast``."""
    return {
        "sendrecv": send_recv(topology, reshards, pieces),
        "alpa": send_recv(topology, reshards, pieces, local_allgather=True),
        "broadcast": seed_broadcast(topology, reshards, pieces, seed=seed),
    }


__all__ = ["host_tasks", "plans", "seed_broadcast", "send_recv"]
