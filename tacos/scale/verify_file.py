"""``tacosc verify plan.json`` on a symmetric plan file (:mod:`tacos.scale.plan_json`).

The file is read back into a :class:`~tacos.model.symmetric_plan.SymmetricPlan` and checked by
:func:`tacos.check.symmetric.verify_symmetric` (never expanded); the makespan the file states
must be the plan's, and with ``--topology`` the file's system must be that topology
(:func:`tacos.model.clos.recognize`).
"""

from __future__ import annotations

import math
from typing import Any

from tacos.check.symmetric import SymmetricReport, verify_symmetric
from tacos.errors import VerificationError
from tacos.model.topology import Topology
from tacos.scale.plan_json import loads, system_doc


def verify_symmetric_text(text: str, source: str = "<string>",
                          topology: Topology | None = None) -> SymmetricReport:
    """The report of the symmetric plan in ``text`` (its rules: ``template``, ``embedding``,
    ``overlap``, ``order``, ``data``, and ``makespan`` for a stated makespan that is not the
    plan's); a :class:`~tacos.errors.TacosError` when ``text`` is not a plan file, a
    :class:`~tacos.errors.VerificationError` when it was made for another system than
    ``topology``."""
    import json

    plan = loads(text, source)
    if topology is not None:
        from tacos.model.clos import recognize

        found = recognize(topology)

        def same(doc: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in doc.items() if k != "name"}

        if found is None or same(system_doc(found)) != same(system_doc(plan.system)):
            raise VerificationError(f"{source} was not made for this topology",
                                    hint=f"the plan is for {plan.system.name}; this topology "
                                         f"is {topology.name or 'another system'}")
    report = verify_symmetric(plan)
    stated: Any = json.loads(text).get("makespan")
    if not isinstance(stated, (int, float)) or not math.isclose(
            float(stated), plan.makespan, rel_tol=1e-12, abs_tol=0.0):
        report.problems.append(("makespan", f"the file states a makespan of {stated!r} s, the "
                                            f"plan's phases end at {plan.makespan!r} s"))
    return report
