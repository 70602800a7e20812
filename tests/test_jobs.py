"""Jobs sharing a fabric: routing by ECMP hash and seed 002's greedy, fairness, joint plans."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.cli import main
from tacos.errors import TacosError
from tacos.jobs import routing
from tacos.jobs.fairness import Outcome, jain, key
from tacos.jobs.model import Job
from tacos.jobs.plan import plan_jobs
from tacos.jobs.routed import RoutedJobs
from tacos.model.patterns import build

EXAMPLE = Path(__file__).parent.parent / "examples" / "jobs_fattree.tdl"


def ring_job(name: str, hosts, size: int = 96 << 20, priority: int = 0) -> Job:
    return Job(name, tuple(hosts), (build("allreduce", hosts, size=size),), priority)


@pytest.fixture(scope="module")
def fig2():
    """Seed 002's Figure 2: 8 hosts on 4 ToRs, 2 spines, every link of capacity 1."""
    return tacos.parse("fattree s[8] leaves=4 spines=2 down 12.5GB/s 1us "
                       "up 12.5GB/s 1us\n").topology


@pytest.fixture(scope="module")
def fig2_jobs():
    # j1 = s1 -> s2 -> s3 -> s1, j2 = s4 -> s5 -> s6 -> s4 (two hosts per ToR)
    return [ring_job("j1", (0, 1, 2)), ring_job("j2", (3, 4, 5))]


def test_figure2_flows_and_greedy_reaches_the_optimum(fig2, fig2_jobs) -> None:
    usual = RoutedJobs(fig2, fig2_jobs)
    # inter-ToR flows: s2->s3, s3->s1 (j1) and s4->s5, s6->s4 (j2); the rest stay in a ToR
    assert usual.all_flows == [(0, 1, 2), (0, 2, 0), (1, 3, 4), (1, 5, 3)]
    greedy = usual.assign("greedy")
    assert routing.congestion(greedy) == 1  # every flow alone on its links
    collisions = {routing.congestion(usual.assign("ecmp", seed)) for seed in range(16)}
    assert collisions == {1, 2}  # hashing collides for some seeds, not all


def test_ecmp_is_a_stable_seeded_hash(fig2, fig2_jobs) -> None:
    usual = RoutedJobs(fig2, fig2_jobs)
    a = usual.assign("ecmp", 7)
    assert a == usual.assign("ecmp", 7)
    for (_, u, v), r in a.items():
        assert r in fig2.routing.routes(u, v)


def test_figure2_plans(fig2, fig2_jobs) -> None:
    res = plan_jobs(fig2, fig2_jobs, objective="fairness", seed=0)
    assert res.outcome("greedy").slowdowns == pytest.approx((1.0, 1.0))
    assert res.outcome("tacos").worst == pytest.approx(1.0)  # the optimum: as if alone
    assert res.outcome("ecmp").worst >= 1.5  # seed 0 hashes two flows onto one uplink
    for m in res.methods.values():
        assert verify_schedule(m.schedule).ok
    plans = res.plans()
    assert set(plans) == {"j1", "j2"}
    for name, plan in plans.items():
        assert verify_schedule(plan).ok
        assert plan.collective.group == next(j.group for j in fig2_jobs if j.name == name)
    text = res.text()
    assert "worst slowdown" in text and "Jain" in text


def test_fairness_metrics() -> None:
    assert jain([1, 1, 1]) == pytest.approx(1.0)
    assert jain([1, 0, 0]) == pytest.approx(1 / 3)
    even = Outcome((2.0, 2.0), (1.0, 1.0))
    skewed = Outcome((1.0, 3.0), (1.0, 1.0))
    assert key(even, "fairness") < key(skewed, "fairness")  # max slowdown 2 < 3
    assert key(skewed, "makespan") > key(even, "makespan")
    # priority: job 1 (priority 1) first, whatever happens to job 0
    assert key(skewed, "priority", [1, 0]) < key(even, "priority", [1, 0])
    with pytest.raises(ValueError):
        key(even, "speed")


def test_oversubscribed_fabric_fairness_beats_ecmp() -> None:
    topo = tacos.parse("fattree h[8] leaves=2 spines=2 down 50GB/s 1us up 25GB/s 1us\n")\
        .topology  # 4:1 at the leaves
    jobs = [ring_job("a", (0, 4), 32 << 20), ring_job("b", (1, 2, 5, 6), 64 << 20),
            ring_job("c", (3, 7), 16 << 20)]
    res = plan_jobs(topo, jobs, objective="fairness", seed=3)
    assert res.outcome("tacos").worst <= res.outcome("ecmp").worst + 1e-12
    assert res.outcome("tacos").worst <= res.outcome("greedy").worst + 1e-12
    assert all(s >= 1 - 1e-9 for s in res.outcome("tacos").slowdowns)


def test_bad_requests() -> None:
    topo = tacos.parse("fattree h[8] leaves=2 spines=2 down 50GB/s up 25GB/s\n").topology
    with pytest.raises(TacosError, match="objective"):
        plan_jobs(topo, [ring_job("a", (0, 4))], objective="speed")
    with pytest.raises(TacosError, match="belongs to jobs"):
        plan_jobs(topo, [ring_job("a", (0, 4)), ring_job("b", (4, 5))])
    with pytest.raises(TacosError, match="not in the job's group"):
        Job("a", (0, 1), (build("allreduce", (0, 1, 2), size=1 << 20),))


def test_tdl_jobs(capsys) -> None:
    spec = tacos.load(EXAMPLE)
    assert [j.name for j in spec.jobs] == ["bloom", "gpt", "llama"]
    assert spec.jobs[1].priority == 1 and spec.jobs[1].collectives[0].group == spec.jobs[1].group
    assert main(["info", str(EXAMPLE)]) == 0
    assert "jobs: 3" in capsys.readouterr().out


def test_cli_writes_one_verified_plan_per_job(tmp_path: Path, capsys) -> None:
    tdl = tmp_path / "jobs.tdl"
    tdl.write_text('fattree h[8] leaves=2 spines=2 down 50GB/s 1us up 25GB/s 1us\n'
                   'job "big" group h[0], h[4] priority 1 { collective allreduce size 8MiB }\n'
                   'job "small/1" group h[1], h[5] { collective allgather size 2MiB }\n')
    out = tmp_path / "plan.json"
    assert main([str(tdl), "-q", "--objective", "priority", "-o", str(out), "--report"]) == 0
    text = capsys.readouterr().out
    assert "objective: priority" in text and "ecmp" in text and "greedy" in text
    for name in ("big", "small_1"):
        path = tmp_path / f"plan.{name}.json"
        assert main(["verify", str(path), "--topology", str(tdl)]) == 0
