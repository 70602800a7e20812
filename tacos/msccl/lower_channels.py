"""Channels, thread blocks and fused operations of a lowered schedule.

* **Channels.**  Every run travels on a FIFO lane ``(src, dst, piece, lane)`` (lanes separate
  transfers that overlap in time on parallel links).  Its channel key is ``(hint, piece, group,
  segment, lane)``: ``hint`` is a channel group the schedule asks for per transfer
  (``meta['channel_of_transfer']``, e.g. one per tree group of the forest solver; 0 otherwise),
  ``group`` spreads the peers of a rank so that no channel has more than 32 send (receive)
  peers; ``segment`` counts the cuts the step limit put on the lane.  Keys are numbered densely
  in sorted order, so a plain ring uses channel 0 only.
* **Thread blocks.**  One tb owns each ``(channel, direction, peer)`` connection.  On every rank
  and channel, receive peers are paired with send peers by a maximum-weight matching whose
  weights count the receives that directly feed a send (candidates for ``rcs``/``rrs``/
  ``rrcs``); a paired tb has ``send=w recv=x``, the rest are single-direction tbs.
* **Fusion.**  A receive and the next step of its tb fuse when that step sends exactly the
  values just received (same versions, same chunks).  A fused reduce whose result nobody else
  reads and that is not the rank's final value becomes ``rrs`` (nothing stored).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from tacos.errors import TacosError
from tacos.msccl.lower_flow import SEND, Flow
from tacos.msccl.program import MAX_TBS_PER_CHANNEL

TbKey = tuple[int, int, int]  # (chan, send peer, recv peer); -1 = none


def channel_keys(flow: Flow, cuts: dict[tuple[int, int, int, int], list[int]],
                 hints: list[int] | None = None) -> list[tuple[int, int, int, int, int]]:
    """The channel key ``(hint, piece, group, segment, lane)`` of every run; ``hints[t]`` is a
    channel group asked for by the schedule for transfer t (0 without hints)."""
    pairs = sorted({(r.src, r.dst) for r in flow.runs})
    out_n: dict[tuple[int, int], int] = defaultdict(int)
    in_n: dict[tuple[int, int], int] = defaultdict(int)
    group: dict[tuple[int, int], int] = {}
    for u, v in pairs:
        g = 0
        while out_n[(u, g)] >= MAX_TBS_PER_CHANNEL or in_n[(v, g)] >= MAX_TBS_PER_CHANNEL:
            g += 1
        group[(u, v)] = g
        out_n[(u, g)] += 1
        in_n[(v, g)] += 1
    keys = []
    for r in flow.runs:
        seg = bisect_right(cuts.get(r.conn, []), r.conn_index)
        hint = hints[r.transfer] if hints else 0
        keys.append((hint, r.piece, group[(r.src, r.dst)], seg, r.lane))
    return keys


def channels_error(needed: int, max_channels: int) -> TacosError:
    """The error of a round whose runs need ``needed`` channels, more than ``max_channels``."""
    return TacosError(
        f"the plan needs {needed} channels but at most {max_channels} are allowed",
        hint="raise the step limit (max_steps_per_tb) if your MSCCL build allows it, use "
             "fewer chunks per NPU or instances, or raise max_channels (hard limit 32)")


def assign_channels(flow: Flow, cuts: dict[tuple[int, int, int, int], list[int]],
                    max_channels: int, hints: list[int] | None = None, *,
                    counts: list[int] | None = None) -> tuple[list[int], int]:
    """Channel of every run and the channel count; raises if more than ``max_channels``.
    ``counts``, when given, gets the number of distinct channel keys appended (also when it
    raises)."""
    keys = channel_keys(flow, cuts, hints)
    dense = {k: n for n, k in enumerate(sorted(set(keys)))}
    if counts is not None:
        counts.append(len(dense))
    if len(dense) > max_channels:
        raise channels_error(len(dense), max_channels)
    return [dense[k] for k in keys], max(1, len(dense))


@dataclass
class TbPlan:
    """Which tb every run's sending and receiving step belongs to (lists indexed by run id),
    and the fused pairs."""

    send_tb: list[TbKey]
    recv_tb: list[TbKey]
    fused: dict[int, int]
    absorbed: frozenset[int]
    unstored: frozenset[int]
    sequence: dict[tuple[int, TbKey], list[tuple[str, int]]]
    #: whether ``pair`` makes (would make) a difference: some rank and channel has a receive
    #: peer and a send peer that the matching leaves single (otherwise both plans are equal)
    pairing_matters: bool = False


def feeders(flow: Flow) -> list[int]:
    """Per run, the run that created exactly the versions it sends (same piece), or -1;
    computed once per flow (the rounds of :func:`tacos.msccl.lower.lower` share it)."""
    got = flow.cache.get("feeders")
    if got is None:
        runs = flow.runs
        made = {(r.creates, r.piece): r.id for r in runs}
        got = flow.cache["feeders"] = [made.get((r.reads, r.piece), -1) for r in runs]
    return got


def _matching(flow: Flow, edges: tuple) -> dict[int, int]:
    """Receive peer -> send peer of a maximum-weight matching of ``edges`` (``((x, w), wt)``,
    sorted).  The matching is computed on the peers renumbered in sorted order and remembered
    per flow: networkx's blossom algorithm depends on the node insertion order and the weights
    only, never on the labels' values, and most ranks of a regular topology (and the later
    rounds) ask for the same renumbered graphs."""
    xs = sorted({x for (x, _), _ in edges})
    ws = sorted({w for (_, w), _ in edges})
    if len(xs) == len(ws) == len(edges):
        # the edges share no peer: taking them all is the only maximum (weights are >= 1)
        return {x: w for (x, w), _ in edges}
    memo = flow.cache.setdefault("matchings", {})
    xi = {x: n for n, x in enumerate(xs)}
    wi = {w: n for n, w in enumerate(ws)}
    key = tuple(((xi[x], wi[w]), wt) for (x, w), wt in edges)
    got = memo.get(key)
    if got is None:
        g = nx.Graph()
        for (x, w), wt in key:
            g.add_edge(("r", x), ("s", w), weight=wt)
        got = {}
        for a, b in nx.max_weight_matching(g):
            (_, x), (_, w) = (a, b) if a[0] == "r" else (b, a)
            got[x] = w
        memo[key] = got
    return {xs[x]: ws[w] for x, w in got.items()}


def _pair_rest(matched: dict[int, int], recv: set[int], send: set[int]) -> dict[int, int]:
    """``matched`` (receive peer -> send peer) with the single peers paired: a receive peer
    with the same send peer first, the rest in sorted order."""
    out = dict(matched)
    rest_r = sorted(recv - set(out))
    rest_s = set(send) - set(out.values())
    for x in list(rest_r):
        if x in rest_s:
            out[x] = x
            rest_s.discard(x)
            rest_r.remove(x)
    for x, w in zip(rest_r, sorted(rest_s), strict=False):
        out[x] = w
    return out


def plan_tbs(flow: Flow, chan: list[int], forbidden: set[tuple[int, int]], *,
             pair: bool = False) -> TbPlan:
    """Pair peers into tbs per rank and channel, then decide which steps fuse.  With ``pair``
    the peers the matching leaves single are paired too (the same peer first, then in sorted
    order), so a rank's connections share fewer, evenly loaded tbs."""
    runs = flow.runs
    feeder = feeders(flow)
    weight: dict[tuple[int, int], dict[tuple[int, int], int]] = defaultdict(
        lambda: defaultdict(int))
    recv_peers: dict[tuple[int, int], set[int]] = defaultdict(set)
    send_peers: dict[tuple[int, int], set[int]] = defaultdict(set)
    for r in runs:
        ch = chan[r.id]
        recv_peers[(r.dst, ch)].add(r.src)
        send_peers[(r.src, ch)].add(r.dst)
        fid = feeder[r.id]
        if fid >= 0:
            f = runs[fid]
            if f.dst == r.src and chan[fid] == ch:
                weight[(r.src, ch)][(f.src, r.dst)] += 1
    tb_of_recv: dict[tuple[int, int, int], TbKey] = {}
    tb_of_send: dict[tuple[int, int, int], TbKey] = {}
    matters = False
    for rank, ch in sorted(set(recv_peers) | set(send_peers)):
        edges = tuple(sorted(weight.get((rank, ch), {}).items()))
        matched_r = _matching(flow, edges) if edges else {}
        if not matters:
            matters = (len(recv_peers.get((rank, ch), ())) > len(matched_r)
                       and len(send_peers.get((rank, ch), ())) > len(matched_r))
        if pair:
            matched_r = _pair_rest(matched_r, recv_peers.get((rank, ch), set()),
                                   send_peers.get((rank, ch), set()))
        matched_s = {w: x for x, w in matched_r.items()}
        for x in sorted(recv_peers.get((rank, ch), ())):
            tb_of_recv[(rank, ch, x)] = (ch, matched_r.get(x, -1), x)
        for w in sorted(send_peers.get((rank, ch), ())):
            tb_of_send[(rank, ch, w)] = (ch, w, matched_s.get(w, -1))
    send_tb = [tb_of_send[(r.src, chan[r.id], r.dst)] for r in runs]
    recv_tb = [tb_of_recv[(r.dst, chan[r.id], r.src)] for r in runs]
    # each run's sending and receiving tb with its rank, one tuple each (not one per event)
    send_at = [(r.src, tb) for r, tb in zip(runs, send_tb, strict=True)]
    recv_at = [(r.dst, tb) for r, tb in zip(runs, recv_tb, strict=True)]
    sequence: dict[tuple[int, TbKey], list[tuple[str, int]]] = defaultdict(list)
    for ev in flow.order:
        kind, idx = ev
        if kind == "send":
            sequence[send_at[idx]].append(ev)
        elif kind == "recv":
            sequence[recv_at[idx]].append(ev)
    del send_at, recv_at
    fused: dict[int, int] = {}
    for seq in sequence.values():
        k = 0
        n = len(seq)
        while k + 1 < n:
            (k1, a), (k2, b) = seq[k], seq[k + 1]
            if k1 == "recv" and k2 == "send":
                ra, rb = runs[a], runs[b]
                if (rb.reads == ra.creates and rb.piece == ra.piece
                        and (a, b) not in forbidden):
                    fused[a] = b
                    k += 2
                    continue
            k += 1
    unstored = set()
    for a, b in fused.items():
        r = runs[a]
        if r.prevs is None:
            continue
        if all(flow.readers.get(flow.vp(vid, r.piece), []) == [3 * b + SEND]
               and vid not in flow.final for vid in r.creates):
            unstored.add(a)
    return TbPlan(send_tb, recv_tb, fused, frozenset(fused.values()), frozenset(unstored),
                  dict(sequence), matters)
