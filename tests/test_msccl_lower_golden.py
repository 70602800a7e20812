"""The lowering's exact output on fixed schedules, and the shortcuts that keep it fast.

``fixtures/lowering/*.json`` are schedules (greedy and forest, every lowerable collective,
process groups); ``golden.json`` holds the SHA-256 of the XML the lowering wrote for each under
several option sets before it was made faster (measured in ``docs/benchmarks/
scale-lowering.md``); the option sets the runtime shaping uses (``fit_fifo`` off, paired
peers, port order, a size window) were added at ``e4a94ca``, hashed by that commit's
lowering.  Speed work must not change a byte; a deliberate change of the output
updates the hashes and says why.  Every plan is also verified (``schedule_to_xml`` refuses an
unverified one) and parsed back.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import networkx as nx
import pytest
from tacos.frontends.json_schedule import load

from tacos.check.verify import verify_schedule
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.lower_channels import _matching
from tacos.msccl.lower_steps import make_step
from tacos.msccl.program import Step
from tacos.msccl.ranks import ranks_comment
from tacos.msccl.xml_reader import parse_xml
from tacos.msccl.xml_writer import emit_xml, schedule_to_xml

FIXTURES = Path(__file__).parent / "fixtures" / "lowering"
GOLDEN = json.loads((FIXTURES / "golden.json").read_text())
CASES = sorted(GOLDEN["sha256"])


@pytest.fixture(scope="module")
def schedules() -> dict:
    return {p.stem: load(p) for p in FIXTURES.glob("*.json") if p.name != "golden.json"}


def test_every_fixture_has_golden_hashes(schedules) -> None:
    assert {case.split("|")[0] for case in CASES} == set(schedules)
    assert {case.split("|")[1] for case in CASES} == set(GOLDEN["options"])


#: the all-to-all on the 20-NPU hypercube's heavier option sets (0.1-0.2 s each): -m slow
SLOW_CASES = {f"hypercube_alltoall_greedy|{o}" for o in (
    "shaping_paired4", "inplace_instances3_steps16", "shaping_ports2", "steps8", "instances2")}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES
                                  else c for c in CASES])
def test_lowered_xml_is_byte_identical_to_the_golden_plan(schedules, case: str) -> None:
    name, option_set = case.split("|")
    schedule = schedules[name]
    assert verify_schedule(schedule).ok
    options = MscclOptions(**GOLDEN["options"][option_set])
    text = schedule_to_xml(schedule, options)  # raises unless the program verifies
    assert hashlib.sha256(text.encode()).hexdigest() == GOLDEN["sha256"][case]
    program = lower(schedule, options=options)
    assert parse_xml(text) == program
    assert ranks_comment(schedule.collective.group) + emit_xml(program) == text


def test_lowering_is_repeatable_in_one_process(schedules) -> None:
    """Memoized matchings and feeders are per flow: a second lowering gives the same plan."""
    schedule = schedules["mesh4x4_allreduce_greedy"]
    first = emit_xml(lower(schedule))
    assert emit_xml(lower(schedule)) == first


def test_fast_step_constructor_equals_the_dataclass() -> None:
    values = (5, "rrcs", "s", 300, "o", 1_000_000, 3, 17, 42, 1, 0)
    fast, slow = make_step(*values), Step(*values)
    assert type(fast) is Step
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.reads() == slow.reads() and fast.writes() == slow.writes()
    with pytest.raises(AttributeError):
        fast.s = 6  # type: ignore[misc]  # still frozen


def _nx_matching(edges) -> dict[int, int]:
    g = nx.Graph()
    for (x, w), wt in edges:
        g.add_edge(("r", x), ("s", w), weight=wt)
    out = {}
    for a, b in nx.max_weight_matching(g):
        (_, x), (_, w) = (a, b) if a[0] == "r" else (b, a)
        out[x] = w
    return out


class _Flow:
    def __init__(self) -> None:
        self.cache: dict = {}


def test_renumbered_matchings_equal_networkx_on_the_peers_themselves() -> None:
    """The memo matches the renumbered graph; networkx must give the same pairs (ties
    included) as on the real peer ids, which it does because it never looks at label values."""
    rng = random.Random(7)
    flow = _Flow()
    for _ in range(300):
        xs = rng.sample(range(600), rng.randint(1, 7))
        ws = rng.sample(range(600), rng.randint(1, 7))
        edges = tuple(sorted({(x, w): rng.choice((1, 1, 2, 3)) for x in xs for w in ws
                              if x != w and rng.random() < 0.6}.items()))
        if edges:
            assert _matching(flow, edges) == _nx_matching(edges)


def test_graphs_of_one_shape_share_a_memoized_matching() -> None:
    flow = _Flow()
    first = (((3, 10), 3), ((3, 12), 1), ((5, 10), 1))
    second = (((40, 7), 3), ((40, 9), 1), ((41, 7), 1))  # the same graph, other peers
    assert _matching(flow, first) == _nx_matching(first) == {3: 10}
    assert _matching(flow, second) == _nx_matching(second) == {40: 7}
    assert len(flow.cache["matchings"]) == 1
