"""Place transfers on the physical links one by one, first fit (the machine model's timing).

A :class:`Timeline` books each transfer at the earliest time at which its chunks are at the
sender and every link of its route has a free lane for the whole cut-through duration
(``docs/machine-model.md``), so a later transfer may fill a gap left by earlier ones.  Options
model how a runtime issues the transfers:

* ``streams=True``: each NPU runs its point-to-point operations one after the other in the
  order they are placed (NCCL send/recv on one stream, as Alpa's resharding does): a transfer
  starts after the previous operation of its sender and of its receiver has finished;
* ``not_before``: a time before which the transfer may not start (a task waiting for its hosts).

A send between NPUs that no single route joins is relayed, store-and-forward, along the
fewest-hop chain of routes (:class:`~tacos.solvers.lowering.hops.NpuGraph`).  The result is a
:class:`~tacos.model.schedule.Schedule` of copies on the physical topology.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tacos.errors import InfeasibleError, ToolFailure
from tacos.model.collective import Collective
from tacos.model.routes import Route
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology
from tacos.solvers.lowering.hops import NpuGraph
from tacos.solvers.lowering.program import LinkCalendar


class Timeline:
    """First-fit booking of copy transfers on ``topology``'s links for ``collective``."""

    def __init__(self, topology: Topology, collective: Collective) -> None:
        self.topology = topology
        self.collective = collective
        self.routing = topology.routing
        self.calendar = LinkCalendar(topology)
        self._graph: NpuGraph | None = None
        self.have: dict[tuple[int, int], float] = {}
        for c in collective.chunks:
            for v in c.pre:
                self.have[(v, c.id)] = 0.0
        self.stream: dict[int, float] = {}
        self.transfers: list[Transfer] = []

    # -- booking ---------------------------------------------------------------------------
    def fit(self, route: Route, ready: float, duration: float) -> float:
        """Earliest start ≥ ``ready`` at which every link of ``route`` has a free lane."""
        return self.calendar.fit(route.links, ready, duration)

    def ready(self, npu: int, chunks: Iterable[int]) -> float:
        """When every chunk of ``chunks`` is at ``npu`` (error if one never gets there)."""
        out = 0.0
        for c in chunks:
            t = self.have.get((npu, c))
            if t is None:
                raise ToolFailure(f"chunk {c} is sent from {self.topology.node_name(npu)} "
                                  "before it gets there",
                                  hint="this is a bug in the plan builder; please report it")
            out = max(out, t)
        return out

    def book(self, src: int, dst: int, chunks: Sequence[int], route: Route,
             start: float) -> float:
        """Record the transfer at ``start`` and return its end time."""
        nbytes = sum(self.collective.chunks[c].size for c in chunks)
        duration = route.time(nbytes)
        self.calendar.book(route.links, start, duration)
        end = start + duration
        self.transfers.append(Transfer(start, end, src, dst, route.links,
                                       tuple(sorted(chunks)), "copy"))
        for c in chunks:
            key = (dst, c)
            if key not in self.have or self.have[key] > end:
                self.have[key] = end
        return end

    def hop(self, src: int, dst: int, chunks: Sequence[int], *, route: Route | None = None,
            not_before: float = 0.0) -> float:
        """Send ``chunks`` over one route (``route``, or the candidate that ends first)."""
        nbytes = sum(self.collective.chunks[c].size for c in chunks)
        ready = max(not_before, self.ready(src, chunks))
        cands = (route,) if route is not None else self.routing.routes(src, dst)
        if not cands:
            raise InfeasibleError(f"no route from {self.topology.node_name(src)} to "
                                  f"{self.topology.node_name(dst)}")
        best: tuple[float, Route] | None = None
        for r in cands:
            s = self.fit(r, ready, r.time(nbytes))
            if best is None or s + r.time(nbytes) < best[0] + best[1].time(nbytes):
                best = (s, r)
        assert best is not None
        return self.book(src, dst, chunks, best[1], best[0])

    def send(self, src: int, dst: int, chunks: Sequence[int], *, streams: bool = False,
             not_before: float = 0.0, pipelined: bool = False) -> float:
        """Send ``chunks`` from ``src`` to ``dst`` (relayed when no single route joins them);
        returns when they have arrived.  ``streams``: see the module docstring.  A relayed
        send moves the chunks together, or chunk by chunk when ``pipelined`` (a relay then
        forwards one chunk while it receives the next, as NCCL's proxies do)."""
        start = not_before
        if streams:
            start = max(start, self.stream.get(src, 0.0), self.stream.get(dst, 0.0))
        if self.routing.routes(src, dst):
            end = self.hop(src, dst, chunks, not_before=start)
        else:
            path = self.graph().route(src, dst)
            if path is None:
                raise InfeasibleError(f"{self.topology.node_name(dst)} cannot be reached from "
                                      f"{self.topology.node_name(src)}")
            end = start
            for part in ([(c,) for c in chunks] if pipelined else [tuple(chunks)]):
                t = start
                for a, b in zip(path, path[1:], strict=False):
                    t = self.hop(a, b, part, not_before=t)
                end = max(end, t)
        if streams:
            self.stream[src] = self.stream[dst] = end
        return end

    def graph(self) -> NpuGraph:
        """The NPU hop graph used for relays (built on first use)."""
        if self._graph is None:
            self._graph = NpuGraph(self.topology)
        return self._graph

    # -- result ----------------------------------------------------------------------------
    @property
    def makespan(self) -> float:
        """End of the last booked transfer."""
        return max((t.end for t in self.transfers), default=0.0)

    def schedule(self, meta: dict[str, Any] | None = None) -> Schedule:
        """The booked transfers as a schedule (sorted by time)."""
        return Schedule(self.topology, self.collective, tuple(sorted(self.transfers)),
                        dict(meta or {}))


__all__ = ["Timeline"]
