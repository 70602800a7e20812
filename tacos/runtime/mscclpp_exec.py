"""How the MSCCL++ executor runs a JSON execution plan, as a timed replay.

Semantics (``docs/msccl-xml.md`` §4; microsoft/mscclpp ``execution_kernel.hpp``):

* Each thread block is one CTA running its ops in order; the grid of a GPU runs at once.
* Data ops (``put``/``get``/``copy``, reductions ``re``/``rre``/``res``/``rres``, LL packet ops,
  port ``pws``/``pwsf``, switch ``glres``/``gstore``) move whole byte ranges: chunk sizes x the
  plan's chunk unit (``nbytes`` / the collective's chunk count).  A memory or port op runs at
  the smaller of the CTA's rate and its share of every port on the route to the peer (the
  port's effective payload rate split among the plan's flows that cross it); LL packet ops at
  half the payload.  A switch op (``glres``/``gstore``) moves its range once through every
  member's switch port, whichever rank issues it (a ``glres`` of ``s`` bytes: every port sends
  ``s`` up and receives ``s`` down), so it runs at the smaller of the CTA's rate and the
  generation's NVLS rate (``nvls_algbw``, what NCCL's NVLS all-reduce reaches) shared by every
  thread block of the plan that issues switch ops: one root issuing every ``glres`` on ``T``
  thread blocks and every rank issuing its ``1/n`` on ``T/n`` load the ports alike.
* ``signal`` costs one hop latency and is seen by the peer's ``wait`` one hop later;
  semaphores and barriers order the CTAs of one GPU.
* The kernel pays the protocol's base latency once.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence

from tacos.errors import TacosError
from tacos.model.topology import Topology
from tacos.msccl.mscclpp_reader import Op, Plan
from tacos.runtime.estimate import RuntimeEstimate
from tacos.runtime.hardware import Hardware, resolve

_COPY = frozenset({"put", "get", "copy", "pws", "pwsf", "ppkt", "rppkt", "cpkt", "upkt"})
_REDUCE = frozenset({"re", "rre", "res", "rres", "repkt", "recpkt", "respkt", "recspkt"})
_SWITCH = frozenset({"glres", "gstore", "gstorepkt"})
_PACKET = frozenset({"ppkt", "rppkt", "cpkt", "upkt", "repkt", "recpkt", "respkt", "recspkt",
                     "gstorepkt"})


def _chunk_count(plan: Plan) -> int:
    c = plan.chunks.get(0, {})
    if plan.coll == "allgather":
        return max(1, c.get("o", 0))
    return max(1, c.get("i", 0) or c.get("o", 0))


def _remote_ranks(op: Op) -> set[int]:
    return {r.rank for r in op.src + op.dst if r.rank != op.rank}


def estimate_mscclpp(plan: Plan, topology: Topology, nbytes: int, *,
                     ranks: Sequence[int] | None = None,
                     hardware: Hardware | str | None = None) -> RuntimeEstimate:
    """Runtime-model time of an MSCCL++ execution ``plan`` (as read by
    :func:`tacos.frontends.mscclpp_json.load_plan`) moving ``nbytes`` (the collective's total
    buffer, as for MSCCL XML) on ``topology``, rank r on NPU ``ranks[r]``."""
    from tacos.msccl.ranks import resolve_ranks

    hw = resolve(topology, hardware)
    npus, _ = resolve_ranks(topology, plan.ngpus, explicit=ranks)
    if nbytes <= 0:
        raise TacosError("the message size must be positive")
    proto = "LL" if plan.protocol == "LL" else "Simple"
    unit = nbytes / _chunk_count(plan)
    routes: dict[tuple[int, int], tuple[int, ...]] = {}
    users: dict[int, int] = defaultdict(int)
    switch_users = 0  # thread blocks of the plan that issue switch ops
    for (g, _t), ops in sorted(plan.tbs.items()):
        flows = set()
        for op in ops:
            if op.name in _SWITCH:
                flows.add(("switch", g))
            elif op.name in _COPY | _REDUCE:
                for peer in _remote_ranks(op):
                    flows.add((g, peer))
        for f in flows:
            if f[0] == "switch":
                switch_users += 1
                continue
            a, b = f
            if (a, b) not in routes:
                route = topology.routing.best(npus[a], npus[b], unit)
                if route is None:
                    raise TacosError(f"the topology has no route from rank {a} to rank {b}",
                                     hint="time the plan on the topology it was made for")
                routes[(a, b)] = tuple(route.links)
            for li in routes[(a, b)]:
                users[li] += 1
    hop = hw.hop_latency(proto, hw.link_class)
    busy: dict[tuple[int, int], float] = defaultdict(float)
    limits: dict[tuple[int, int], str] = {}

    def duration(op: Op) -> float:
        size = max((r.size for r in op.dst), default=0) or max((r.size for r in op.src),
                                                               default=0)
        fan = 1 if op.name in _SWITCH else len([r for r in op.dst if r.rank != op.rank])
        nb = size * unit * max(1, fan)
        pay = 0.5 if op.name in _PACKET else 1.0
        rate, why = (hw.cta_reduce_rate(proto) if op.name in _REDUCE else
                     hw.cta_rate[proto]), "cta"
        if op.name in _SWITCH:
            share = hw.nvls_algbw / max(1, switch_users) if hw.nvls_algbw else rate
            if share < rate:
                rate, why = share, "nvls"
        for peer in _remote_ranks(op):
            for li in routes.get((op.rank, peer), ()):
                lk = topology.links[li]
                share = hw.link_rate(lk) * pay * min(lk.multiplicity, users[li]) / users[li]
                if share < rate:
                    rate, why = share, f"link {topology.node_name(lk.src)}->" \
                                       f"{topology.node_name(lk.dst)}"
        limits[(op.rank, op.tb)] = why
        return nb / rate

    keys = sorted(plan.tbs)
    clock = {k: 0.0 for k in keys}
    pc = {k: 0 for k in keys}
    chan: dict[tuple[int, int, int], deque[float]] = defaultdict(deque)
    sem: dict[tuple[int, int], deque[float]] = defaultdict(deque)
    for g, inits in plan.semaphores.items():
        for s, v in enumerate(inits):
            sem[(g, s)].extend([0.0] * int(v or 0))
    waiting: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    released: set[tuple[int, int]] = set()
    moved = True
    while moved:
        moved = False
        for k in keys:
            ops = plan.tbs[k]
            while pc[k] < len(ops):
                op = ops[pc[k]]
                name = op.name
                if name in ("wait", "rlxwait"):
                    qs = [chan[(op.rank, p, n)] for p, n in op.peers]
                    if not all(qs):
                        break
                    clock[k] = max([clock[k]] + [q.popleft() for q in qs])
                elif name == "sem_acquire":
                    qs = [sem[(op.rank, s)] for s in op.sems]
                    if not all(qs):
                        break
                    clock[k] = max([clock[k]] + [q.popleft() for q in qs])
                elif name == "barrier" and op.barrier is not None and k not in released:
                    key = (op.rank, op.barrier[0])
                    if k not in waiting[key]:
                        waiting[key].append(k)
                    if len(waiting[key]) < op.barrier[1]:
                        break
                    group = waiting.pop(key)
                    top = max(clock[m] for m in group)
                    for m in group:
                        clock[m] = top
                    released.update(group)
                if name == "barrier":
                    released.discard(k)
                if name in _COPY or name in _REDUCE or name in _SWITCH:
                    d = duration(op)
                    clock[k] += d
                    busy[k] += d
                if name in ("signal", "rlxsignal", "pws", "pwsf"):
                    clock[k] += hop
                    for p, n in op.peers:
                        chan[(p, op.rank, n)].append(clock[k] + hop)
                elif name == "sem_release":
                    for s in op.sems:
                        sem[(op.rank, s)].append(clock[k])
                pc[k] += 1
                moved = True
    stuck = [k for k in keys if pc[k] < len(plan.tbs[k])]
    if stuck:
        g, t = stuck[0]
        raise TacosError(f"cannot time the plan: rank {g} tb {t} waits forever at op "
                         f"{pc[stuck[0]]}", hint="tacosc verify names the deadlock")
    base = hw.base_latency(proto)
    end = max(clock.values(), default=0.0)
    time = base + end
    worst = max(busy, key=busy.__getitem__, default=None)
    if worst is None or busy[worst] < 0.5 * end:
        bound = "latency (signal/wait chains)"
    else:
        why = limits.get(worst, "cta")
        bound = f"cta: rank {worst[0]} tb {worst[1]} at its per-CTA rate" if why == "cta" \
            else f"{why.split(' ')[0]}: {why.partition(' ')[2] or why} shared by the CTAs " \
                 "that cross it"
    ctas = max((sum(1 for g, _ in keys if g == r) for r in range(plan.ngpus)), default=0)
    return RuntimeEstimate.of(time, nbytes, plan.coll, plan.ngpus, f"mscclpp-executor/{hw.name}",
                              f"{bound} ({proto}, {ctas} CTAs per GPU)", protocol=proto,
                              ctas=ctas)
