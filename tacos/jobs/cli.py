"""``tacosc FILE.tdl`` for files with ``job`` statements: plan the jobs together, report, write
one plan per job.

``--objective`` chooses what tacos's joint plan optimizes (``makespan``, ``fairness``,
``priority``); ``--seed`` seeds ECMP's hash and the synthesis.  With ``-o PLAN.json`` (or
``.xml``) each job's plan is written next to it as ``PLAN.<job>.json``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from tacos.errors import UsageError


def job_paths(output: str, names: list[str]) -> dict[str, Path]:
    """``plan.json`` → ``{job: plan.<job>.json}`` (job names made file-safe)."""
    out = Path(output)
    paths: dict[str, Path] = {}
    for name in names:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "job"
        path = out.with_name(f"{out.stem}.{safe}{out.suffix}")
        if path in paths.values():
            raise UsageError(f"two jobs would both be written to {path}",
                             hint="give the jobs names that differ in letters or digits")
        paths[name] = path
    return paths


def compile_jobs(spec: Any, args: argparse.Namespace, fmt: str | None, reporter: Any) -> int:
    """Plan ``spec.jobs`` as ``args`` say; print the comparison; write one plan per job."""
    from tacos.cli import _render, write_output
    from tacos.jobs.plan import plan_jobs
    from tacos.reshard.cli import run_options, show

    if spec.collectives or spec.reshards:
        raise UsageError(f"{args.topology} declares jobs and also top-level collectives or "
                         "reshards", hint="put every collective inside a job, or pass "
                         "--collective NAME to synthesize one collective instead")
    solver = args.solver if getattr(args, "solver_given", True) else None  # None: all of them
    with reporter.phase("planning the jobs"):
        result = plan_jobs(spec.topology, spec.jobs, objective=args.objective or "makespan",
                           seed=args.seed, solver=solver, **run_options(args))
    if args.output:
        plans = result.plans()
        texts = {name: _render(plan, fmt, args) for name, plan in plans.items()}
        for name, path in job_paths(args.output, list(plans)).items():
            write_output(path, texts[name])
            if not args.json:
                print(f"wrote {path}")
    show(result, args, always=True, kind="jobs")  # the comparison is what the command is for
    return 0


__all__ = ["compile_jobs", "job_paths"]
