"""Symmetric systems and plans: multi-rail Clos and tori, one solve per group shape, plans
checked without expansion and, on small systems, against the full verifier."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

import tacos
from tacos.check.bounds import lower_bound
from tacos.check.bounds_symmetric import symmetric_bound
from tacos.check.symmetric import check_embedding, verify_symmetric
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.clos import ClosFabric, clos_h100, prime_digits, recognize
from tacos.model.symmetric_plan import SymmetricPlan, expand
from tacos.model.symmetry import Embedding
from tacos.model.torus_axes import TorusAxes
from tacos.scale.pipeline import schedule_parts
from tacos.scale.synthesize import TemplateSolver, synthesize_symmetric

CLOS2 = ClosFabric(4, 2, hosts_per_leaf=2)
CLOS3 = ClosFabric(8, 3, hosts_per_leaf=2, leaves_per_pod=2)
TORUS = TorusAxes((3, 4, 5))


def _named_links(topo: tacos.Topology) -> Counter:
    return Counter((topo.node_name(lk.src), topo.node_name(lk.dst), lk.alpha, lk.bandwidth,
                    lk.multiplicity) for lk in topo.links)


def _hand_built(f: ClosFabric) -> Counter:
    """The fabric's links written out from its description, by names."""
    out: Counter = Counter()

    def both(a: str, b: str, alpha: float, bw: float) -> None:
        out[(a, b, alpha, bw, 1)] += 1
        out[(b, a, alpha, bw, 1)] += 1

    top = "spine" if f.tiers == 2 else "agg"
    leaves = f.nodes // f.hosts_per_leaf
    per_pod = f.leaves_per_pod if f.tiers == 3 else leaves
    pods, h = leaves // per_pod, f.hosts_per_leaf
    for n in range(f.nodes):
        for g in range(f.gpus):
            gpu = f"node[{n}].gpu[{g}]"
            both(gpu, f"node[{n}].nvswitch", f.nvlink_alpha, f.nvlink)
            both(gpu, f"leaf[{g * leaves + n // h}]", f.nic_alpha, f.nic)
    for g in range(f.gpus):
        for leaf in range(leaves):
            pod = leaf // per_pod
            for a in range(h):
                both(f"leaf[{g * leaves + leaf}]", f"{top}[{(g * pods + pod) * h + a}]",
                     f.fabric_alpha, f.fabric)
                if f.tiers == 3 and leaf % per_pod == 0:
                    for c in range(f.leaves_per_pod):
                        both(f"agg[{(g * pods + pod) * h + a}]",
                             f"core[{(g * h + a) * f.leaves_per_pod + c}]",
                             f.fabric_alpha, f.fabric)
    return out


@pytest.mark.parametrize("fabric", [CLOS2, CLOS3], ids=["2-tier", "3-tier"])
def test_clos_links_are_the_described_fabric(fabric: ClosFabric) -> None:
    topo = fabric.topology()
    assert topo.n_npus == fabric.nodes * 8 and topo.n_nodes == fabric.n_nodes
    assert _named_links(topo) == _hand_built(fabric)
    # every switch within the port budget, every GPU on one NIC
    degree = Counter(lk.src for lk in topo.links)
    assert max(degree[s.id] for s in topo.switches) <= fabric.ports
    assert all(degree[v] == 2 for v in range(topo.n_npus))


@pytest.mark.parametrize(("params", "fabric"),
                         [({"nodes": 4, "hosts_per_leaf": 2}, CLOS2),
                          ({"nodes": 8, "tiers": 3, "hosts_per_leaf": 2, "leaves_per_pod": 2},
                           CLOS3)], ids=["2-tier", "3-tier"])
def test_the_preset_is_the_fabric_and_is_recognized(params, fabric: ClosFabric) -> None:
    topo = tacos.preset("clos_h100", **params).topology
    assert _named_links(topo) == _named_links(fabric.topology())
    found = recognize(topo)
    assert found is not None and (found.nodes, found.tiers) == (fabric.nodes, fabric.tiers)
    assert found.link_table(np.arange(found.n_links)).src.tolist() == \
        [lk.src for lk in topo.links]
    assert recognize(tacos.preset("dgx_h100", nodes=2).topology) is None
    with pytest.raises(TacosError, match="isomorphic groups"):
        synthesize_symmetric(tacos.preset("dgx_h100", nodes=2).topology, "allreduce", 2**20)
    plan = synthesize_symmetric(topo, "allgather", 2**20, parts=1, solvers=("direct",))
    assert verify_symmetric(plan).ok and expand(plan).topology == fabric.topology()
    assert recognize(tacos.preset("clos_h100", nodes=4, hosts_per_leaf=2,
                                  nic_alpha=2).topology).nic_alpha == pytest.approx(2e-6)


def test_torus_links_are_the_builders_torus() -> None:
    ours = TORUS.topology()
    ref = tacos.builders.torus(3, 4, 5, bandwidth=TORUS.bandwidth, latency=TORUS.alpha)
    assert Counter((lk.src, lk.dst) for lk in ours.links) == \
        Counter((lk.src, lk.dst) for lk in ref.links)


@pytest.mark.parametrize("system", [CLOS2, CLOS3, TORUS], ids=["clos2", "clos3", "torus"])
def test_every_copy_is_the_template_on_private_links(system) -> None:
    topo = system.topology()
    for axis in range(len(system.axes)):
        assert check_embedding(system, axis) == []
        tp, emb = system.template(axis), system.embed(axis)
        for c in range(len(emb.nodes)):
            for j, lk in enumerate(tp.links):
                g = topo.links[int(emb.links[c, j])]
                assert (g.src, g.dst) == (emb.nodes[c, lk.src], emb.nodes[c, lk.dst])
                assert (g.alpha, g.bandwidth) == (lk.alpha, lk.bandwidth)


def test_clos_refuses_impossible_shapes() -> None:
    with pytest.raises(TacosError, match="fill leaves"):
        clos_h100(nodes=33)
    with pytest.raises(TacosError, match="ports"):
        clos_h100(nodes=4096, tiers=2)
    with pytest.raises(TacosError, match="2 or 3 tiers"):
        clos_h100(nodes=64, tiers=4)
    f = clos_h100(nodes=5000, tiers=3, hosts_per_leaf=25, leaves_per_pod=25)
    assert f.n_npus == 40000 and f.pods == 8
    assert [a.size for a in f.axes] == [8] + prime_digits(25) * 2 + prime_digits(8)


@pytest.mark.parametrize(("system", "kind"), [
    (CLOS2, "allreduce"), (CLOS3, "reducescatter"),
    pytest.param(TORUS, "allgather", marks=pytest.mark.slow)],  # ~0.8 s
    ids=["clos2-allreduce", "clos3-reducescatter", "torus-allgather"])
def test_symmetric_synthesis_equals_full_synthesis(system, kind) -> None:
    parts = 3 if kind == "allgather" else 2
    size = 2**22 // system.n_npus * system.n_npus * 3
    sym = synthesize_symmetric(system, kind, size, parts=parts, solvers=("greedy", "direct"))
    full = synthesize_symmetric(system, kind, size, parts=parts, solvers=("greedy", "direct"),
                                symmetric=False)
    assert sym.makespan == full.makespan
    assert verify_symmetric(sym).ok
    written = expand(sym)
    assert written.makespan == pytest.approx(sym.makespan, rel=1e-12)
    report = verify_schedule(written)
    assert report.ok, str(report)
    # the expansion solves the collective tacos knows (pieces of the standard chunks)
    ref = tacos.collective(kind, range(system.n_npus), size=sym.size)
    assert sum(c.size for c in written.collective.chunks) == sum(c.size for c in ref.chunks)
    assert sym.makespan >= lower_bound(written.topology, ref).value


@pytest.mark.parametrize("system", [CLOS2, CLOS3, TORUS, TorusAxes((4, 4))],
                         ids=["clos2", "clos3", "torus", "torus2d"])
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
def test_closed_form_bound_is_lower_bound(system, kind) -> None:
    topo = system.topology()
    for size in (2**26, 64 * system.n_npus):
        size = size // system.n_npus * system.n_npus
        ref = lower_bound(topo, tacos.collective(kind, range(system.n_npus), size=size))
        assert symmetric_bound(system, kind, size) == pytest.approx(ref.value, rel=1e-9)


def test_pipeline_runs_parts_on_free_resources() -> None:
    part = [("nv", "reducescatter", 1.0), ("fab", "reducescatter", 0.5), ("nv", "allgather", 1.0)]
    # at t=2 part 2's reduce-scatter and part 0's all-gather could both take "nv"
    assert schedule_parts([part] * 3, feed_first=("nv",)) == \
        [[0.0, 1.0, 3.0], [1.0, 2.0, 4.0], [2.0, 3.0, 5.0]]
    assert schedule_parts([part] * 3) == [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [4.0, 5.0, 5.5]]


# -- the symbolic verifier rejects wrong plans --------------------------------------------------

@pytest.fixture(scope="module")
def good() -> SymmetricPlan:
    plan = synthesize_symmetric(CLOS2, "allreduce", 2**22 // 32 * 32 * 2, parts=2,
                                solvers=("greedy",))
    assert verify_symmetric(plan).ok and verify_schedule(expand(plan)).ok
    return plan


def _with(plan: SymmetricPlan, phases) -> SymmetricPlan:
    return replace(plan, phases=tuple(phases))


def test_rejects_a_phase_started_before_its_input(good: SymmetricPlan) -> None:
    ph = list(good.phases)
    k = next(i for i, p in enumerate(ph) if p.part == 0 and p.axis == 1)
    ph[k] = replace(ph[k], start=ph[k].start - 1e-6)
    bad = _with(good, ph)
    assert "order" in verify_symmetric(bad).rules()
    assert not verify_schedule(expand(bad)).ok


def test_rejects_a_missing_phase(good: SymmetricPlan) -> None:
    last = max(good.phases, key=lambda p: p.end)
    bad = _with(good, [p for p in good.phases if p is not last])
    assert "data" in verify_symmetric(bad).rules()
    assert not verify_schedule(expand(bad)).ok


def test_rejects_phases_sharing_links_at_once(good: SymmetricPlan) -> None:
    ph = list(good.phases)
    first = [i for i, p in enumerate(ph) if p.part == 1]
    shift = min(ph[i].start for i in first)
    for i in first:
        ph[i] = replace(ph[i], start=ph[i].start - shift)
    bad = _with(good, ph)
    assert verify_symmetric(bad).rules() == {"overlap"}
    assert {v.rule for v in verify_schedule(expand(bad)).violations} >= {"overlap"}


def test_rejects_a_template_of_the_wrong_size(good: SymmetricPlan) -> None:
    ph = list(good.phases)
    a = next(i for i, p in enumerate(ph) if p.part == 0 and p.axis == 0)
    twice = TemplateSolver(("greedy",), 0)(CLOS2.template(0), ph[a].kind,
                                           2 * ph[a].template.collective.size)
    assert verify_schedule(twice).ok
    ph[a] = replace(ph[a], template=twice)
    assert "data" in verify_symmetric(_with(good, ph)).rules()


def test_rejects_a_broken_template(good: SymmetricPlan) -> None:
    ph = list(good.phases)
    k = next(i for i, p in enumerate(ph) if p.axis == 1)
    t = ph[k].template
    ph[k] = replace(ph[k], template=replace(t, transfers=tuple(t.transfers)[1:]))
    assert "template" in verify_symmetric(_with(good, ph)).rules()


class _Crossed(ClosFabric):
    """The same fabric with two copies of the ``gpu`` axis swapped onto each other's links."""

    def embed(self, axis: int) -> Embedding:
        e = super().embed(axis)
        if axis:
            return e
        links = e.links.copy()
        links[[0, 1]] = links[[1, 0]]
        return Embedding(e.nodes, links, e.coords)


def test_rejects_copies_on_the_wrong_links(good: SymmetricPlan) -> None:
    crossed = _Crossed(4, 2, hosts_per_leaf=2)
    bad = replace(good, system=crossed)
    assert "embedding" in verify_symmetric(bad).rules()
    assert not verify_schedule(expand(bad)).ok


def test_reports_numbers_without_expanding() -> None:
    big = clos_h100(nodes=512, tiers=2, hosts_per_leaf=16)
    plan = synthesize_symmetric(big, "allgather", 2**30, parts=1, solvers=("greedy",))
    rep = verify_symmetric(plan)
    assert rep.ok, str(rep)
    assert plan.n_transfers >= 8 * big.n_npus and rep.stats["templates"] <= len(big.axes)
    assert plan.makespan >= symmetric_bound(big, "allgather", plan.size)
    assert np.isfinite(plan.makespan)


@pytest.mark.slow
def test_clos_1024_nodes_allreduce_within_5_percent() -> None:
    fabric = clos_h100(nodes=1024, tiers=2)
    plan = synthesize_symmetric(fabric, "allreduce", 4 * 2**30)
    assert verify_symmetric(plan).ok
    assert plan.makespan <= 1.05 * symmetric_bound(fabric, "allreduce", plan.size)
