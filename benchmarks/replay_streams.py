"""An independent replay of an MSCCL XML program: one stream per thread block, every loop
iteration played out, ports shared by the transfers active at each instant.

This is a second implementation of how msccl-executor-nccl runs a program, written apart from
:mod:`tacos.runtime.msccl_exec` (it shares only the hardware parameters of
:mod:`tacos.runtime.hardware` and the program's data classes) to check the runtime model's
time of the plans tacos emits.  How it replays:

* Every ``<tb>`` is one stream running its steps in order, for every loop iteration in turn
  (iteration ``i+1`` of a stream starts after its iteration ``i``); a step's ``depid``/``deps``
  waits for that step of the named tb in the same iteration.
* One MSCCL chunk is ``nbytes / nchunksperloop``; an iteration moves one slice of every chunk
  (the protocol's per-call payload, the last slice smaller); a step of ``cnt`` chunks is
  ``ceil(cnt / k)`` primitive calls, ``k`` the slices that fit one call's payload (at most 71).
* A send (``s``) pays one hop latency per call, then its bytes flow through every link of the
  route at ``min(CTA rate, link rate / transfers active on the link now)`` -- a fluid
  simulation re-sharing every port at each event (the runtime model instead splits a port
  statically among the program's connections and times one iteration, then a steady state).
* The ``k``-th send of a connection pairs with its ``k``-th receive; a send waits until the
  receive ``depth`` messages back has completed (``NCCL_STEPS`` slots over the slots a call
  takes).  A receive (``r``, ``rrc``) ends when its data has arrived and its CTA has copied or
  reduced it; a fused ``rcs``/``rrs``/``rrcs`` starts forwarding one hop after the upstream
  send started (that hop *is* its first call's synchronization: the flag it waits for is the
  upstream's data landing, so a chain of forwards pays one hop latency per hop, NCCL's ring
  latency ``nsteps x hwLat`` in ``tuning.cc``; a stream that reaches the step later pays its
  own calls' latency from then) and ends no earlier than one hop after the upstream send
  ended.
* ``cpy``/``re`` run at the CTA's copy/reduce rate; ``nop`` only orders.  The protocol's base
  latency is added once.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence

from tacos.model.topology import Topology
from tacos.msccl.program import Program
from tacos.runtime.hardware import hardware_for

FUSED = {"rcs", "rrs", "rrcs"}
REDUCES = {"rrc", "rrs", "rrcs", "re"}
SEND_ONLY = {"s"}
RECV_ONLY = {"r", "rrc"}


def replay(program: Program, topology: Topology, nbytes: int,
           ranks: Sequence[int] | None = None) -> float:
    """Seconds the program takes for an ``nbytes`` message in the stream replay."""
    hw = hardware_for(topology)
    proto = program.proto
    npus = list(ranks) if ranks is not None else list(topology.live_npus)[:program.ngpus]
    chunk = nbytes / program.nchunksperloop
    per_call = hw.chunk_payload(proto)
    iters = max(1, math.ceil(chunk / per_call))
    slices = [min(per_call, chunk - per_call * i) for i in range(iters)]
    k = max(1, min(71, int(per_call // max(1.0, slices[0]))))
    cta = hw.cta_rate[proto]
    cta_red = hw.cta_reduce_rate(proto)
    pay = hw.payload(proto)
    depth_slots = int(hw.common["nccl_steps"])
    slots = hw.slots_per_call(proto)

    tbs = {(g.id, tb.id): tb for g in program.gpus for tb in g.tbs}
    routes: dict[tuple[int, int], tuple[list[int], float]] = {}

    def route(a: int, b: int) -> tuple[list[int], float]:
        if (a, b) not in routes:
            r = topology.routing.best(npus[a], npus[b], chunk)
            links = list(r.links)
            cls = {hw.classify(topology.links[i]) for i in links}
            table = "nic" if "nic" in cls else "pcie" if "pcie" in cls else hw.link_class
            routes[(a, b)] = (links, hw.hop_latency(proto, table))
        return routes[(a, b)]

    cap = {i: hw.link_rate(lk) * pay * lk.multiplicity for i, lk in enumerate(topology.links)}
    # k-th send / receive of every connection (rank, peer, channel), per iteration order
    send_no: dict[tuple, int] = {}
    recv_no: dict[tuple, int] = {}
    per_iter_sends: dict[tuple, int] = defaultdict(int)
    per_iter_recvs: dict[tuple, int] = defaultdict(int)
    for (r, _t), tb in tbs.items():
        for i, st in enumerate(tb.steps):
            if st.sends:
                c = (r, tb.send, tb.chan)
                send_no[(r, tb.id, i)] = per_iter_sends[c]
                per_iter_sends[c] += 1
            if st.receives:
                c = (tb.recv, r, tb.chan)
                recv_no[(r, tb.id, i)] = per_iter_recvs[c]
                per_iter_recvs[c] += 1

    done: dict[tuple, float] = {}        # (rank, tb, iter, step) -> end time
    send_start: dict[tuple, float] = {}  # (conn, seq) -> time its bytes started to flow
    send_end: dict[tuple, float] = {}    # (conn, seq) -> time its last byte arrived
    recv_end: dict[tuple, float] = {}    # (conn, seq) -> time the receive completed
    waiters: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    head = {key: (0, 0) for key in tbs}  # stream -> (iteration, step)
    ready_at = {key: 0.0 for key in tbs}
    timers: list[tuple[float, int, tuple]] = []  # (time, seq, event)
    flows: dict[int, list] = {}  # id -> [remaining, links, cta, on_end]
    seq = [0]
    now = [0.0]

    def push(t: float, event: tuple) -> None:
        seq[0] += 1
        heapq.heappush(timers, (t, seq[0], event))

    def wait(key: tuple, stream: tuple[int, int]) -> bool:
        waiters[key].append(stream)
        return False

    def finish(stream: tuple[int, int], it: int, i: int, t: float) -> None:
        r, tbid = stream
        done[(r, tbid, it, i)] = t
        for s in waiters.pop(("done", r, tbid, it, i), []):
            push(t, ("try", s))
        nxt = (it, i + 1) if i + 1 < len(tbs[stream].steps) else (it + 1, 0)
        head[stream] = nxt
        ready_at[stream] = t
        push(t, ("try", stream))

    def mark(kind: str, key: tuple, t: float, table: dict) -> None:
        table[key] = t
        for s in waiters.pop((kind, key), []):
            push(t, ("try", s))

    def try_start(stream: tuple[int, int]) -> None:
        it, i = head[stream]
        tb = tbs[stream]
        if it >= iters or ("busy", stream) in running:
            return
        r = stream[0]
        st = tb.steps[i]
        t = max(now[0], ready_at[stream])
        if st.depid >= 0 and (r, st.depid, it, st.deps) not in done:
            wait(("done", r, st.depid, it, st.deps), stream)
            return
        if st.depid >= 0:
            t = max(t, done[(r, st.depid, it, st.deps)])
        size = st.cnt * slices[it]
        calls = math.ceil(st.cnt / k) if st.cnt else 0
        up = None
        if st.receives:
            c_in = (tb.recv, r, tb.chan)
            up = (c_in, it * per_iter_recvs[c_in] + recv_no[(r, tb.id, i)])
        if st.sends:
            c_out = (r, tb.send, tb.chan)
            me = (c_out, it * per_iter_sends[c_out] + send_no[(r, tb.id, i)])
            depth = max(1, depth_slots // (slots * max(1, calls)))
            back = (c_out, me[1] - depth)
            if me[1] >= depth and back not in recv_end:
                wait(("recv", back), stream)
                return
            if me[1] >= depth:
                t = max(t, recv_end[back])
        if st.type in FUSED:
            if up not in send_start:
                wait(("sstart", up), stream)
                return
        if st.type in RECV_ONLY and up not in send_start:
            wait(("sstart", up), stream)
            return
        running.add(("busy", stream))
        if st.type == "nop" or st.cnt == 0:
            push(t, ("end", stream, it, i, None))
        elif st.type in ("cpy", "re"):
            push(t + size / (cta_red if st.type in REDUCES else cta), ("end", stream, it, i, None))
        elif st.type in RECV_ONLY:
            t = max(t, send_start[up])
            push(t + size / (cta_red if st.type in REDUCES else cta),
                 ("recvwork", stream, it, i, up))
        else:  # s or fused: latency, then a flow
            links, lat = route(r, tb.send)
            start = t + calls * lat
            if st.type in FUSED:  # the first call's wait is the upstream data's hop
                start = max(start, send_start[up] + lat)
            push(start, ("flow", stream, it, i, me, up, size, links, lat,
                         cta_red if st.type in REDUCES else cta))

    running: set = set()
    for key in tbs:
        push(0.0, ("try", key))

    def rates() -> dict[int, float]:
        users: dict[int, int] = defaultdict(int)
        for f in flows.values():
            for i in f[1]:
                users[i] += 1
        return {fid: min([f[2]] + [cap[i] / users[i] for i in f[1]])
                for fid, f in flows.items()}

    # steps whose bytes are done but that wait for the upstream send's end (fused, receives)
    waiters_fused: dict[tuple, list] = defaultdict(list)
    flows_pending_fused: dict[tuple, tuple] = {}
    def wake(key: tuple) -> None:
        """Receives and fused steps waiting for the end of send ``key``."""
        for w in waiters_fused.pop(key, []):
            _me, up, lat, end = flows_pending_fused.pop(w)
            push(max(end, now[0], send_end[up] + lat), ("end", w[0], w[1], w[2], None))

    fid_seq = 0
    while timers or flows:
        rt = rates() if flows else {}
        t_flow, first = math.inf, None
        for fid, f in flows.items():
            te = now[0] + f[0] / rt[fid]
            if te < t_flow:
                t_flow, first = te, fid
        t_timer = timers[0][0] if timers else math.inf
        t_next = min(t_flow, t_timer)
        dt = t_next - now[0]
        for fid, f in flows.items():
            f[0] -= rt[fid] * dt
        now[0] = t_next
        if t_flow <= t_timer and first is not None:
            f = flows.pop(first)
            stream, it, i, me, up, lat = f[3]
            mark("send", me, now[0], send_end)
            end = now[0]
            if up is not None:  # fused: no earlier than one hop after upstream's end
                if up not in send_end:
                    flows_pending_fused[(stream, it, i)] = (me, up, lat, end)
                    waiters_fused[up].append((stream, it, i))
                else:
                    push(max(end, send_end[up] + lat), ("end", stream, it, i, None))
            else:
                push(end, ("end", stream, it, i, None))
            wake(me)
            continue
        _, _, ev = heapq.heappop(timers)
        kind = ev[0]
        if kind == "try":
            try_start(ev[1])
        elif kind == "end":
            _, stream, it, i, _ = ev
            st = tbs[stream].steps[i]
            tb = tbs[stream]
            if st.receives:
                c_in = (tb.recv, stream[0], tb.chan)
                mark("recv", (c_in, it * per_iter_recvs[c_in] + recv_no[(stream[0], tb.id, i)]),
                     now[0], recv_end)
            running.discard(("busy", stream))
            finish(stream, it, i, now[0])
        elif kind == "recvwork":
            _, stream, it, i, up = ev
            if up not in send_end:
                waiters_fused[up].append((stream, it, i))
                flows_pending_fused[(stream, it, i)] = (None, up, 0.0, now[0])
                continue
            push(max(now[0], send_end[up]), ("end", stream, it, i, None))
        elif kind == "flow":
            _, stream, it, i, me, up, size, links, lat, rate = ev
            mark("sstart", me, now[0], send_start)
            fid_seq += 1
            flows[fid_seq] = [size, links, rate, (stream, it, i, me, up, lat)]
    return hw.base_latency(proto) + now[0]

