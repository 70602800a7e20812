"""One greedy trial on the engine that fits it: the port engine for instances on physical
links (:mod:`tacos.solvers.greedy.ports`, compiled by :mod:`tacos.solvers.greedy.jit_ports`
when it covers the instance), the compiled core when it covers the instance and
pays (:mod:`tacos.solvers.greedy.jit`), else the pure-Python core
(:mod:`tacos.solvers.greedy.core`).  All three give the same result for the same
``(seed, trial, cap)``."""

from __future__ import annotations

from tacos.solvers.greedy import jit as greedy_jit
from tacos.solvers.greedy.core import TrialResult, run_python_trial
from tacos.solvers.greedy.instance import Instance


def run_trial(inst: Instance, seed: int, trial: int, cap: int, speculate: bool = True,
              jit: bool = True) -> TrialResult:
    """Run one randomized trial; deterministic in ``(seed, trial, cap)``.

    With ``jit`` (and numba installed, ``TACOS_JIT`` not ``0``) the trials the compiled core
    covers (:func:`tacos.solvers.greedy.jit.supported`) run there, with the same result, when
    it pays (:func:`tacos.solvers.greedy.jit.worth_it`)."""
    if inst.physical:
        from tacos.solvers.greedy import jit_ports

        if jit and jit_ports.supported(inst) and jit_ports.worth_it(inst) \
                and jit_ports.available():
            return jit_ports.run_port_trial_compiled(inst, seed, trial, cap)
        from tacos.solvers.greedy.ports import run_port_trial

        return run_port_trial(inst, seed, trial, cap)
    if not (speculate and (cap > 1 or inst.heterogeneous)):
        speculate = False  # equal single-chunk transfers: a resend never lands earlier
    if (jit and greedy_jit.supported(inst) and greedy_jit.worth_it(inst)
            and greedy_jit.available()):
        return greedy_jit.run_trial_compiled(inst, seed, trial, cap, speculate)
    return run_python_trial(inst, seed, trial, cap, speculate)
