"""How msccl-executor-nccl runs an MSCCL XML program, as a discrete-event model.

Semantics (``docs/msccl-xml.md`` §1.9-1.10; Azure/msccl-executor-nccl ``msccl_kernel.cu``):

* Each ``<tb>`` is one CTA running its transmissions (the runtime's folding of steps, nops and
  fused ``re`` chains: :func:`tacos.msccl.verify_model.build_model`) in order.
* One MSCCL chunk is ``nbytes / nchunksperloop`` bytes.  The kernel loops over it in slices of
  the protocol's chunk size (Simple: ``MSCCL_CHUNKSTEPS`` = 4 FIFO steps of 512 KiB; LL one
  32 KiB step; LL128 one 576000 B step); every iteration runs the whole program on one slice
  of every chunk.  A step of ``cnt`` chunks is ``cnt`` primitive calls of one slice (fewer
  when slices are small: ``maxAllowedCount``), each paying the protocol's per-hop
  synchronization latency (NCCL's ``hwLat``).
* A transfer runs at the smaller of its CTA's rate (per protocol) and its share of every port on
  its route: a port's effective payload rate (line rate x link-class efficiency x protocol
  payload) split evenly among the connections of the program that cross it.
* Sends push into a FIFO (capacity one message, as the verifier proves deadlock-free); a
  receive ends when the last byte has arrived and its CTA has copied (or reduced) it; fused
  ``rcs``/``rrs``/``rrcs`` forward while receiving (cut-through after one hop latency);
  dependencies (``depid``/``deps``) wait for the flag of the tb they name.
* Iterations are not separated by barriers: the first is timed event by event, each further
  one adds the busiest resource's work (a CTA's or a port's) -- the pipeline's steady state.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from tacos.errors import TacosError
from tacos.model.topology import Topology
from tacos.msccl.program import REDUCING_TYPES, Program
from tacos.msccl.verify_deps import build_hb, topological_order
from tacos.msccl.verify_model import Model, Tx, build_model
from tacos.runtime.estimate import RuntimeEstimate
from tacos.runtime.hardware import Hardware, resolve

_FUSED = frozenset({"rcs", "rrs", "rrcs"})
_LOCAL = frozenset({"cpy", "re"})


@dataclass
class _Conn:
    """A connection (sending rank, receiving rank, channel) placed on the topology."""

    links: tuple[int, ...]
    latency: float  # per primitive call (s)
    rate: float = 0.0  # payload B/s a transfer on it gets (CTA and port share)
    bound: str = ""


@dataclass
class IterationTiming:
    """The first iteration's event times and the per-iteration work of every resource."""

    makespan: float
    tb_busy: dict[tuple[int, int], float] = field(default_factory=dict)
    tb_sync: dict[tuple[int, int], float] = field(default_factory=dict)
    #: per tb: what limits its largest transfer ("cta", or "link A->B" for a port share)
    tb_limit: dict[tuple[int, int], str] = field(default_factory=dict)
    link_load: dict[int, float] = field(default_factory=dict)
    #: per connection: the (start, end) of its transfers in the first iteration
    spans: dict[tuple[int, int, int], list[tuple[float, float]]] = field(default_factory=dict)


def _route(topology: Topology, a: int, b: int, nbytes: float) -> tuple[int, ...]:
    route = topology.routing.best(a, b, nbytes)
    if route is None:
        raise TacosError(f"the topology has no route from {topology.node_name(a)} to "
                         f"{topology.node_name(b)}, but the program connects them",
                         hint="time the plan on the topology (and --ranks) it was made for")
    return tuple(route.links)


def _connections(model: Model, topology: Topology, ranks: Sequence[int], hw: Hardware,
                 proto: str, chunk: float, concurrent: dict[int, float] | None = None
                 ) -> dict[tuple[int, int, int], _Conn]:
    """The program's connections placed on the topology, each with the rate it gets: a port is
    split evenly among the connections that cross it (``concurrent``: among at most that many
    per port, the mean number active together while the port is busy)."""
    conns: dict[tuple[int, int, int], _Conn] = {}
    users: dict[int, float] = {}
    for key in sorted(model.sender):
        a, b, _c = key
        links = _route(topology, ranks[a], ranks[b], chunk)
        classes = {hw.classify(topology.links[i]) for i in links}
        cls = "nic" if "nic" in classes else "pcie" if "pcie" in classes else hw.link_class
        conns[key] = _Conn(links, hw.hop_latency(proto, cls))
        for i in links:
            users[i] = users.get(i, 0) + 1
    if concurrent:
        users = {i: max(1.0, min(n, concurrent.get(i, n))) for i, n in users.items()}
    cta = hw.cta_rate[proto]
    pay = hw.payload(proto)
    for conn in conns.values():
        best, where = cta, "cta"
        for i in conn.links:
            lk = topology.links[i]
            share = hw.link_rate(lk) * pay * min(lk.multiplicity, users[i]) / users[i]
            if share < best:
                best, where = share, f"link {topology.node_name(lk.src)}->" \
                                     f"{topology.node_name(lk.dst)}"
        conn.rate, conn.bound = best, where
    return conns


def _order(model: Model, preds: list[list[int]]) -> list[int] | None:
    order = topological_order(preds)
    return order if len(order) == len(model.txs) else None


def time_iteration(model: Model, conns: dict[tuple[int, int, int], _Conn], hw: Hardware,
                   proto: str, slice_bytes: float, calls_per_chunk: int, *,
                   hb: Any = None, compiled: bool | None = None) -> IterationTiming:
    """Event times of one loop iteration on ``slice_bytes`` per MSCCL chunk (``hb``: the
    model's happens-before graph, when already built).  ``compiled``: run the same loop
    compiled (:mod:`tacos.runtime.msccl_sim`, same result); None: when it pays."""
    hb = build_hb(model) if hb is None else hb
    if not hb.acyclic:
        raise TacosError("cannot time a program whose happens-before graph has a cycle",
                         hint="tacosc verify names the cycle")
    from tacos.runtime import msccl_sim

    if compiled or (compiled is None and msccl_sim.worth_it(model)):
        got = msccl_sim.time_iteration(model, conns, hw, proto, slice_bytes, calls_per_chunk,
                                       hb)
        if got is not None:
            return IterationTiming(**got)
    n = len(model.txs)
    slots_per_call = hw.slots_per_call(proto)
    match: dict[int, int] = {}  # receive gid -> send gid
    preds = [list(p) for p in hb.preds]
    for conn, sends in model.sends.items():
        recvs = model.recvs.get(conn, [])
        for k, (s, r) in enumerate(zip(sends, recvs, strict=False)):
            match[r.gid] = s.gid
            # NCCL_STEPS slots per connection: the k-th send waits for the receive `depth`
            # messages back to have drained (at least one message of FIFO, as verified)
            slots = slots_per_call * max(1, math.ceil(s.step.cnt / calls_per_chunk))
            depth = max(1, int(hw.common["nccl_steps"]) // slots)
            if k >= depth:
                preds[s.gid].append(recvs[k - depth].gid)
    order = _order(model, preds) or hb.order
    start = [0.0] * n
    finish = [0.0] * n
    cta = hw.cta_rate[proto]
    cta_reduce = hw.cta_reduce_rate(proto)
    out = IterationTiming(0.0)
    for v in order:
        tx: Tx = model.txs[v]
        step = tx.step
        nbytes = step.cnt * slice_bytes * max(1, len(tx.steps) if tx.type == "re" else 1)
        calls = max(1, math.ceil(step.cnt / calls_per_chunk)) if step.cnt else 0
        src = match.get(v)
        ready = max((finish[u] for u in preds[v] if u != src), default=0.0)
        busy = sync = 0.0
        limit = "cta"
        if step.cnt == 0 or tx.type == "nop":
            start[v] = finish[v] = ready
            continue
        own = cta_reduce if tx.type in REDUCING_TYPES else cta
        if tx.type in _LOCAL:
            busy = nbytes / own
            start[v], finish[v] = ready, ready + busy
        elif step.sends and tx.type not in _FUSED:  # plain send
            c = conns[model.send_conn(tx)]
            sync = calls * c.latency
            busy = nbytes / c.rate
            limit = c.bound
            start[v], finish[v] = ready, ready + sync + busy
            out.spans.setdefault(model.send_conn(tx), []).append((ready + sync, finish[v]))
            for i in c.links:
                out.link_load[i] = out.link_load.get(i, 0.0) + nbytes
        elif tx.type in _FUSED:
            cin = conns[model.recv_conn(tx)]
            c = conns[model.send_conn(tx)]
            first = start[src] + cin.latency if src is not None else ready
            start[v] = max(ready, first)
            sync = calls * c.latency
            busy = nbytes / min(c.rate, own)
            limit = c.bound
            tail = finish[src] if src is not None else 0.0  # upstream paid its hops
            finish[v] = max(tail + c.latency, start[v] + sync + busy)
            out.spans.setdefault(model.send_conn(tx), []).append((start[v] + sync, finish[v]))
            for i in c.links:
                out.link_load[i] = out.link_load.get(i, 0.0) + nbytes
        else:  # plain receive (r, rrc)
            start[v] = max(ready, start[src] if src is not None else ready)
            busy = nbytes / own
            tail = finish[src] if src is not None else 0.0  # the sender paid the hop latency
            finish[v] = max(tail, start[v] + busy)
        key = tx.key
        if limit != "cta" or key not in out.tb_limit:
            out.tb_limit[key] = limit
        out.tb_busy[key] = out.tb_busy.get(key, 0.0) + busy
        out.tb_sync[key] = out.tb_sync.get(key, 0.0) + sync
    out.makespan = max(finish, default=0.0)
    return out


def _steady(it: IterationTiming, topology: Topology, hw: Hardware, proto: str,
            scale: float) -> tuple[float, str]:
    """Work per further iteration (s) of the busiest resource, and its name."""
    best, name = 0.0, "latency"
    for key, busy in it.tb_busy.items():
        sync = it.tb_sync.get(key, 0.0)
        t = busy * scale + sync
        if t > best:
            limit = it.tb_limit.get(key, "cta")
            if sync > busy * scale:
                name = f"slices: rank {key[0]} tb {key[1]} (per-call synchronization)"
            elif limit == "cta":
                name = f"cta: rank {key[0]} tb {key[1]} at its per-CTA rate"
            else:
                name = f"link: {limit[5:]} shared by the CTAs that cross it"
            best = t
    pay = hw.payload(proto)
    for i, load in it.link_load.items():
        lk = topology.links[i]
        t = load * scale / (hw.link_rate(lk) * pay * lk.multiplicity)
        if t > best:
            best, name = t, f"link: {topology.node_name(lk.src)}->{topology.node_name(lk.dst)}"
    return best, name


def _concurrency(it: IterationTiming, conns: dict[tuple[int, int, int], _Conn], *,
                 topology: Topology | None = None, hw: Hardware | None = None,
                 proto: str = "Simple") -> dict[int, float]:
    """Per port, the number of connections its payload rate is split among: from the
    first iteration as timed with every connection of the port sharing it.  NVSwitch ports
    and NICs arbitrate among the flows active at each instant (a flow alone gets the whole
    port), so a connection's share is what a flow gets there on average, not the port over
    the most flows that ever meet.

    With ``topology`` and ``hw``: the time-average, over the port's busy time, of what one
    flow gets at each instant -- ``min(CTA rate, port / flows active)`` -- expressed as the
    number of flows that splits the port to it.  A flow cannot take more than its CTA's rate
    while the port is nearly empty, so the quiet spells at the start and the end of an
    iteration do not speed up the flows that run through the crowded middle.  Without them
    (the CTA rate unbounded): the port over the mean number of flows active while it is
    busy."""
    events: dict[int, list[tuple[float, int]]] = {}
    for key, spans in it.spans.items():
        for a, b in spans:
            if b <= a:
                continue
            for i in conns[key].links:
                events.setdefault(i, []).extend(((a, 1), (b, -1)))
    out: dict[int, float] = {}
    for i, evs in events.items():
        evs.sort()
        line, mult, cta = 0.0, 1, 0.0
        if topology is not None and hw is not None:
            lk = topology.links[i]
            line, mult, cta = hw.link_rate(lk) * hw.payload(proto), lk.multiplicity, \
                hw.cta_rate[proto]
        active, last, busy, area = 0, 0.0, 0.0, 0.0
        for t, d in evs:
            if active > 0:
                busy += t - last
                area += (t - last) * (min(cta, line * min(mult, active) / active) if line
                                      else active)
            active += d
            last = t
        if busy <= 0:
            out[i] = 1.0
        elif line:  # the flows that split the port to the mean rate a flow gets
            out[i] = max(1.0, float(mult), line * mult * busy / area)
        else:
            out[i] = max(1.0, area / busy)
    return out


def _port_floor(it: IterationTiming, topology: Topology, hw: Hardware, proto: str) -> float:
    """The least time the iteration's bytes take through its busiest port at the port's full
    payload rate.  A connection's static share of a port is what a flow gets there on
    average (:func:`_concurrency`), so while the port is more crowded than average the
    shares add up to more than the port: the iteration cannot end before its port has
    carried its bytes."""
    pay = hw.payload(proto)
    return max((load / (hw.link_rate(topology.links[i]) * pay * topology.links[i].multiplicity)
                for i, load in it.link_load.items()), default=0.0)


def _check_ll128_net(conns: dict[tuple[int, int, int], _Conn], topology: Topology,
                     hw: Hardware, proto: str) -> None:
    """Refuse LL128 on a connection through a NIC where the runtime does not run it: NCCL
    (and the MSCCL executor on its transports) enables LL128 over the network only when the
    NIC sits behind the GPU's own PCIe switch (``tuning.cc``: ``typeInter <= PATH_PXB``; an
    LL128 line's flag relies on 128-byte writes arriving whole), which the hardware data
    states per generation (``ll128_net``)."""
    if proto != "LL128" or hw.ll128_net:
        return
    for (a, b, _c), conn in sorted(conns.items()):
        if any(hw.classify(topology.links[i]) == "nic" for i in conn.links):
            raise TacosError(
                f"LL128 over the network (rank {a} -> rank {b} crosses a NIC) is disabled on "
                f"{hw.title}: NCCL runs LL128 over a NIC only behind the GPU's own PCIe "
                "switch (tuning.cc, typeInter <= PATH_PXB)",
                hint="use Simple or LL for plans that cross nodes on this system")


#: The folded model and happens-before graph of the last few programs timed, by the identity
#: of their ``gpus`` list (a program timed under several protocols shares it): the protocol
#: is only the program's header, so neither depends on it.  Each entry also holds the steps
#: it was built from (a doubled program's count twice).
_ANALYSED: dict[tuple[int, bool], tuple[Any, Model, Any, int]] = {}
_ANALYSED_MAX = 8
#: The oldest analyses are dropped while the kept ones were built from more steps than this
#: in all; the newest is always kept.  An analysis takes about 1 KB per step (a million-step
#: program of 512 ranks: a gigabyte), so eight of them could fill the memory, while small
#: programs keep all eight and are analysed once for their three protocols.
ANALYSED_MAX_STEPS = 1_000_000


def _analysed(program: Program, twice: bool = False) -> tuple[Model, Any]:
    key = (id(program.gpus), twice)
    got = _ANALYSED.get(key)
    if got is not None and got[0] is program.gpus:
        return got[1], got[2]
    from tacos.nogc import paused_gc
    from tacos.runtime import msccl_sim

    _ANALYSED.pop(key, None)  # a program gone since: its id is reused
    steps = (2 if twice else 1) * sum(len(tb.steps) for g in program.gpus for tb in g.tbs)
    _make_room(steps)  # before building: the dropped analyses' memory is reused
    with paused_gc():  # many small objects, no cycles: full collections only cost
        model = build_model(_twice(program) if twice else program)
        hb = build_hb(model, msccl_sim.topological_order if msccl_sim.worth_it(model) else None)
    _ANALYSED[key] = (program.gpus, model, hb, steps)
    return model, hb


def _make_room(steps: int) -> None:
    """Drop the oldest analyses until one of ``steps`` more fits :data:`_ANALYSED_MAX` and
    :data:`ANALYSED_MAX_STEPS` (or none is left)."""
    held = sum(v[3] for v in _ANALYSED.values())
    while _ANALYSED and (len(_ANALYSED) >= _ANALYSED_MAX
                         or held + steps > ANALYSED_MAX_STEPS):
        held -= _ANALYSED.pop(next(iter(_ANALYSED)))[3]


@contextmanager
def analyses_kept(count: int) -> Iterator[None]:
    """While open, keep at least ``count`` program analyses (still within
    :data:`ANALYSED_MAX_STEPS`); on leaving, the oldest beyond the usual limit are dropped."""
    global _ANALYSED_MAX
    old = _ANALYSED_MAX
    _ANALYSED_MAX = max(old, count)
    try:
        yield
    finally:
        _ANALYSED_MAX = old
        while len(_ANALYSED) > old:
            _ANALYSED.pop(next(iter(_ANALYSED)))


def analysed_steps() -> int:
    """The steps of the programs whose analyses (folded model and happens-before graph) the
    runtime model keeps (a doubled program's twice)."""
    return sum(v[3] for v in _ANALYSED.values())


def forget_analysis(program: Program) -> None:
    """Drop the folded model and happens-before graph kept of ``program`` (both loop forms),
    so that a program no longer used is not kept alive by them."""
    for key in [k for k, v in _ANALYSED.items() if v[0] is program.gpus]:
        del _ANALYSED[key]


def _twice(program: Program) -> Program:
    """The program with every thread block running its steps two times over (two loop
    iterations back to back: a step of the second waits for the same step of the tb it names
    in the second), for timing how far the second iteration trails the first."""
    gpus = []
    for g in program.gpus:
        size = {tb.id: len(tb.steps) for tb in g.tbs}
        tbs = []
        for tb in g.tbs:
            n = len(tb.steps)
            again = tuple(replace(st, s=st.s + n, deps=st.deps + size.get(st.depid, 0)
                                  if st.depid >= 0 else st.deps) for st in tb.steps)
            tbs.append(replace(tb, steps=tb.steps + again))
        gpus.append(replace(g, tbs=tuple(tbs)))
    return replace(program, gpus=tuple(gpus))


def estimate_program(program: Program, topology: Topology, nbytes: int | None = None, *,
                     ranks: Sequence[int] | None = None, hardware: Hardware | str | None = None
                     ) -> RuntimeEstimate:
    """Runtime-model time of an MSCCL XML ``program`` moving ``nbytes`` (the call's total
    bytes, ``count x typesize x sizeMultiplier``; default: the top of its size window) on
    ``topology`` (rank r on NPU ``ranks[r]``; by default as :mod:`tacos.msccl.ranks` finds)."""
    from tacos.msccl.ranks import resolve_ranks
    from tacos.msccl.timing import default_nbytes

    hw = resolve(topology, hardware)
    rank_npus, _ = resolve_ranks(topology, program.ngpus, explicit=ranks)
    nbytes = default_nbytes(program) if nbytes is None else int(nbytes)
    if nbytes <= 0:
        raise TacosError("the message size must be positive")
    proto = program.proto
    model, hb = _analysed(program)
    chunk = nbytes / program.nchunksperloop
    per_call = hw.chunk_payload(proto)
    iters = max(1, math.ceil(chunk / per_call))
    first = min(chunk, per_call)
    calls_per_chunk = max(1, min(71, int(per_call // max(first, 1.0))))
    conns = _connections(model, topology, rank_npus, hw, proto, chunk)
    _check_ll128_net(conns, topology, hw, proto)
    it = time_iteration(model, conns, hw, proto, first, calls_per_chunk, hb=hb)
    concurrent = _concurrency(it, conns, topology=topology, hw=hw, proto=proto)
    crossing: dict[int, int] = {}  # per port, the connections that cross it
    for c in conns.values():
        for i in set(c.links):
            crossing[i] = crossing.get(i, 0) + 1
    if any(n < crossing.get(i, 0) for i, n in concurrent.items()):
        # connections that do not all run together do not all share a port: re-time with
        # the mean number active together while each port is busy
        conns = _connections(model, topology, rank_npus, hw, proto, chunk, concurrent)
        it = time_iteration(model, conns, hw, proto, first, calls_per_chunk, hb=hb)
    base = hw.base_latency(proto)
    first_it = max(it.makespan, _port_floor(it, topology, hw, proto))
    time = base + first_it
    bound = "latency"
    steady_total = 0.0
    if iters > 1:
        full = iters - 1
        last = chunk - per_call * (iters - 1)
        step_full, name = _steady(it, topology, hw, proto, 1.0)
        step_last, _ = _steady(it, topology, hw, proto, last / first)
        # the second iteration timed event by event behind the first: dependency chains
        # across thread blocks and FIFO back-pressure can make it trail by more than the
        # busiest resource's work
        from tacos.runtime import msccl_sim

        span2 = msccl_sim.twice_makespan(model, hb, conns, hw, proto, first, calls_per_chunk)
        if span2 is None:  # fold the doubled program
            model2, hb2 = _analysed(program, twice=True)
            span2 = time_iteration(model2, conns, hw, proto, first, calls_per_chunk,
                                   hb=hb2).makespan
        trail = span2 - it.makespan
        if trail > step_full:
            step_full, name = trail, f"pipeline: iterations trail by {trail * 1e6:.1f} us " \
                f"(busiest resource: {name})"
            step_last = max(step_last, trail * last / first)
        steady_total = step_full * (full - 1) + step_last
        time += steady_total
        bound = name
    if steady_total < it.makespan:
        one, name = _steady(it, topology, hw, proto, 1.0)
        sync = max(it.tb_sync.values(), default=0.0)
        bound = "latency" if base + sync >= one else name
    sms = max((len(g.tbs) for g in program.gpus), default=0)
    channels = program.nchannels
    return RuntimeEstimate.of(
        time, nbytes, program.coll, program.ngpus, f"msccl-executor/{hw.name}",
        f"{bound} ({proto}, {sms} CTAs per GPU, {channels} channels, {iters} iterations)",
        protocol=proto, iterations=iters, ctas=sms, channels=channels,
        first_iteration=first_it, steady=steady_total)
