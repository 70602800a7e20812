"""Step merging for the list schedule (:func:`~tacos.solvers.forest.pipeline.emit` with
``batch='steps'``), built in bulk.

Every (tree, edge, round) -- a *member* -- with the same sender, receiver, route and step forms
one *group*, sent as one transfer once all its slices are at the sender.  Slice j of a tree
edge e = (x, y) travels at step ``depth(x) + j``, or, where the tree labels its edges
(``Tree.steps``, e.g. the binomial stars of :mod:`~tacos.solvers.forest.shared` or the
dimension-ordered trees of :mod:`~tacos.solvers.forest.torus`), at step (family, b) of round
j.  Slices arrive by groups of earlier steps, so with depth steps groups never wait on each
other in a cycle; labelled steps are checked, and if their groups would wait in a cycle the
depth steps are used instead.

A 512-NPU torus has 1.57 M members in 64.5 K groups, so the members are numbered in arrays
(:class:`StepTable`: members in the order tree, edge, round; groups in the order of their first
member) and the list schedule only walks groups: a group waits for the members of its parent
groups (:attr:`StepTable.feeds`), counted per parent group rather than per slice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tacos.solvers.forest.pack import Tree


@dataclass(frozen=True)
class StepTable:
    """Members (tree, edge, round) and their groups.

    ``tree``, ``edge``, ``rnd``, ``group``, ``parent`` are per member (``parent``: the member
    that brings its slice to the sender, -1 from the root); ``step``, ``first``, ``size`` per
    group (priority, first member, member count); ``order``/``start`` list each group's members
    (``order[start[g]:start[g + 1]]``, in member order); ``feeds`` gives, per group g, the
    groups its arrival feeds and how many of their members (``feed_ptr[g]:feed_ptr[g + 1]``
    into ``feed_group``/``feed_count``); ``waits`` per group the members that wait for a
    parent.  All numpy int64 arrays."""

    tree: np.ndarray
    edge: np.ndarray
    rnd: np.ndarray
    group: np.ndarray
    parent: np.ndarray
    step: np.ndarray
    first: np.ndarray
    size: np.ndarray
    order: np.ndarray
    start: np.ndarray
    feed_ptr: np.ndarray
    feed_group: np.ndarray
    feed_count: np.ndarray
    waits: np.ndarray

    @property
    def n_groups(self) -> int:
        """The number of groups."""
        return len(self.step)


def _last_stage(tree: Tree, marks: list) -> list[bool]:
    """Per edge: whether it and every edge below it belong to the root's own family of
    labelled steps (family 0).  Such edges carry data the root has from the start and feed
    nothing else, so all rounds of a step may go as one transfer (the pipeline gains nothing
    from slicing them)."""
    ok = [m is not None and m[0] == 0 for m in marks]
    below: dict[int, bool] = defaultdict(lambda: True)  # node -> all edges below are ok
    for e in range(len(tree.edges) - 1, -1, -1):  # children after parents (BFS order)
        x, y = tree.edges[e]
        ok[e] = ok[e] and below[y]
        below[x] = below[x] and ok[e]
    return ok


def _shape(tree: Tree, labels: bool, whole: bool) -> np.ndarray:
    """Per edge of ``tree``: [x, y, parent edge (-1 at the root), depth(x), family, step,
    kind] with kind 0 = depth steps, 1 = labelled per round, 2 = labelled, all rounds at
    once (the root's own last stage)."""
    marks = tree.steps if labels and tree.steps else [None] * len(tree.edges)
    last = _last_stage(tree, marks)
    depth = {tree.root: 0}
    into: dict[int, int] = {}
    rows = []
    for e, ((x, y), mark) in enumerate(zip(tree.edges, marks, strict=True)):
        depth[y] = depth[x] + 1
        into[y] = e
        if mark is None:
            rows.append((x, y, into.get(x, -1), depth[x], -1, -1, 0))
        else:
            kind = 2 if mark[0] == 0 and whole and last[e] else 1
            rows.append((x, y, into.get(x, -1), depth[x], mark[0], mark[1], kind))
    return np.array(rows, dtype=np.int64).reshape(-1, 7)


def _dense(cols: list[np.ndarray]) -> np.ndarray:
    """One int64 per row of the integer columns ``cols`` (equal rows, equal numbers; the rows'
    order is not kept), via mixed radix when it fits, else by ranking the unique rows."""
    lows = [int(c.min()) if len(c) else 0 for c in cols]
    spans = [int(c.max()) - lo + 1 if len(c) else 1 for c, lo in zip(cols, lows, strict=True)]
    if int(np.prod([float(s) for s in spans])) < 2**62:
        key = np.zeros(len(cols[0]), dtype=np.int64)
        for c, lo, span in zip(cols, lows, spans, strict=True):
            key = key * span + (c - lo)
        return key
    return np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)[1].reshape(-1)


def step_table(trees: list[Tree], npu_of: list[list[int]], hop_ids: list[list[int]],
               n_rounds: list[int], labels: bool = True, whole: bool = True) -> StepTable:
    """The members and groups of step merging (module docstring) for ``trees`` (local ids,
    0 = root), ``npu_of[i][node]`` the NPU of a local node, ``hop_ids[i][e]`` the route id of
    edge e, ``n_rounds[i]`` tree i's rounds.  Labelled steps whose groups would wait in a
    cycle fall back to depth steps (``labels=False``)."""
    shapes: dict[tuple, np.ndarray] = {}  # trees of one shape (tori's translated trees)
    per_tree = []
    for tree in trees:
        key = (tree.root, tuple(tree.edges), id(tree.steps) if labels and tree.steps else 0)
        if key not in shapes:
            shapes[key] = _shape(tree, labels, whole)
        per_tree.append(shapes[key])
    n_edges = np.array([len(t.edges) for t in trees], dtype=np.int64)
    rows = (np.concatenate(per_tree) if per_tree
            else np.zeros((0, 7), dtype=np.int64))
    tree_of_edge = np.repeat(np.arange(len(trees), dtype=np.int64), n_edges)
    edge_start = np.concatenate(([0], np.cumsum(n_edges)[:-1])).astype(np.int64)
    edge_idx = np.arange(len(rows), dtype=np.int64) - edge_start[tree_of_edge]
    src = np.concatenate([np.asarray(npu_of[i], dtype=np.int64)[s[:, 0]]
                          for i, s in enumerate(per_tree)]) if per_tree else rows[:, 0]
    dst = np.concatenate([np.asarray(npu_of[i], dtype=np.int64)[s[:, 1]]
                          for i, s in enumerate(per_tree)]) if per_tree else rows[:, 1]
    hop = np.concatenate([np.asarray(h, dtype=np.int64) for h in hop_ids]) if hop_ids \
        else rows[:, 0]
    # members: every tree edge once per round of its tree
    reps = np.asarray(n_rounds, dtype=np.int64)[tree_of_edge]
    member_start = np.concatenate(([0], np.cumsum(reps)[:-1])).astype(np.int64)
    te = np.repeat(np.arange(len(rows), dtype=np.int64), reps)  # member -> tree edge
    rnd = np.arange(len(te), dtype=np.int64) - member_start[te]
    parent_edge = np.where(rows[:, 2] >= 0, edge_start[tree_of_edge] + rows[:, 2], -1)[te]
    parent = np.where(parent_edge >= 0, member_start[np.maximum(parent_edge, 0)] + rnd, -1)
    depth, fam, lab, kind = rows[te, 3], rows[te, 4], rows[te, 5], rows[te, 6]
    last = np.where(kind == 0, depth + rnd, np.where(kind == 2, -1, rnd))
    when = np.where(kind == 0, depth + rnd, np.where(kind == 2, lab, fam + lab + rnd))
    key = _dense([src[te], dst[te], hop[te], fam, lab, last])
    _, first_of_key, inverse = np.unique(key, return_index=True, return_inverse=True)
    by_first = np.argsort(first_of_key, kind="stable")
    rank = np.empty(len(by_first), dtype=np.int64)
    rank[by_first] = np.arange(len(by_first))
    group = rank[inverse.reshape(-1)]
    first = first_of_key[by_first].astype(np.int64)
    n_groups = len(first)
    size = np.bincount(group, minlength=n_groups).astype(np.int64)
    order = np.argsort(group, kind="stable").astype(np.int64)
    start = np.concatenate(([0], np.cumsum(size))).astype(np.int64)
    # arrivals: a member waits for its parent member's group
    child = np.flatnonzero(parent >= 0)
    pair = group[parent[child]] * max(1, n_groups) + group[child]
    pairs, counts = np.unique(pair, return_counts=True)
    feed_from, feed_group = pairs // max(1, n_groups), pairs % max(1, n_groups)
    feed_ptr = np.searchsorted(feed_from, np.arange(n_groups + 1)).astype(np.int64)
    waits = np.bincount(group[child], minlength=n_groups).astype(np.int64)
    table = StepTable(tree_of_edge[te], edge_idx[te], rnd, group, parent, when[first], first,
                      size, order, start, feed_ptr, feed_group.astype(np.int64),
                      counts.astype(np.int64), waits)
    if labels and any(t.steps for t in trees) and _cyclic(table):
        return step_table(trees, npu_of, hop_ids, n_rounds, labels=False, whole=whole)
    return table


def _cyclic(table: StepTable) -> bool:
    """Whether some groups wait on each other in a cycle (a group waits for the groups that
    bring its members' slices to the sender)."""
    ptr, to = table.feed_ptr.tolist(), table.feed_group.tolist()
    needs = np.bincount(table.feed_group, minlength=table.n_groups).tolist()
    todo = [g for g in range(table.n_groups) if needs[g] == 0]
    seen = 0
    while todo:
        h = todo.pop()
        seen += 1
        for g in to[ptr[h]:ptr[h + 1]]:
            needs[g] -= 1
            if needs[g] == 0:
                todo.append(g)
    return seen < table.n_groups


def step_groups(trees: list[Tree], npu_of: list[list[int]], hop_ids: list[list[int]],
                n_rounds: list[int], labels: bool = True, whole: bool = True,
                ) -> tuple[dict[tuple[int, int, int], int], list[list], list[int]]:
    """:func:`step_table` as Python containers: the group of every (tree, edge, round), each
    group's members (tree, round, edge) and its priority (lower first: the step, counted from
    the round)."""
    t = step_table(trees, npu_of, hop_ids, n_rounds, labels, whole)
    tree, edge, rnd, group = (a.tolist() for a in (t.tree, t.edge, t.rnd, t.group))
    group_of = {(i, e, j): g for i, e, j, g in zip(tree, edge, rnd, group, strict=True)}
    members: list[list] = [[] for _ in range(t.n_groups)]
    for i, e, j, g in zip(tree, edge, rnd, group, strict=True):
        members[g].append((i, j, e))
    return group_of, members, t.step.tolist()
