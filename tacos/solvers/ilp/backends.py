"""Back ends that solve an :class:`~tacos.solvers.ilp.model.IlpModel`.

``cbc`` (PuLP's bundled CBC), ``highs`` (highspy), ``cpsat`` (OR-Tools CP-SAT) and ``gurobi``
(gurobipy, optional).  Packages are located with :func:`importlib.util.find_spec` and imported
only when a back end is used; a missing one raises :class:`~tacos.errors.SolverUnavailableError`
naming the package to install.  Every back end takes a time limit, a seed, a thread count and an
optional warm start (a full 0/1 vector), and returns a :class:`BackendResult`.

highspy and OR-Tools each ship a ``libhighs.so.1``; the dynamic loader keeps one library per
soname, so whichever of the two is loaded second in a process fails with undefined symbols.
A back end whose package would clash with the other installed one therefore runs in a child
process (see :func:`must_isolate`).  For that, this module imports nothing from ``tacos`` at
module level: the child loads this file by path, without the ``tacos`` package (and without
networkx), and receives the matrix as plain lists.
"""

from __future__ import annotations

import atexit
import difflib
import importlib
import importlib.util
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tacos.solvers.ilp.model import IlpModel

MATRIX_FIELDS = ("n_vars", "col_lo", "col_hi", "obj", "starts", "index", "coef", "row_lo",
                 "row_hi")

BACKENDS = ("highs", "cpsat", "cbc", "gurobi")
PACKAGES = {"cbc": "pulp", "highs": "highspy", "cpsat": "ortools", "gurobi": "gurobipy"}
# preference order for the default, fastest first (see docs/benchmarks/ilp.md)
DEFAULT_ORDER = ("highs", "cpsat", "cbc")
HIGHS_MARGIN = 0.9  # share of the remaining time handed to HiGHS as its own limit
CBC_GRACE = 0.5  # seconds CBC gets to write its incumbent after SIGINT before it is killed


@dataclass(frozen=True)
class BackendResult:
    """Outcome of one solve.

    ``status``: ``"optimal"`` (objective proven), ``"infeasible"`` or ``"time_limit"``;
    ``values`` is the best 0/1 vector found (None if none); ``bound`` the proven upper bound on
    the (maximized) objective when the back end reports one.
    """

    status: str
    values: list[float] | None
    objective: float | None
    bound: float | None
    seconds: float


def is_available(name: str) -> bool:
    """True when the package behind back end ``name`` can be imported."""
    pkg = PACKAGES.get(name)
    if pkg is None or importlib.util.find_spec(pkg) is None:
        return False
    if name == "cbc":
        return _cbc_command(importlib.import_module("pulp")) is not None
    return True


def available_backends() -> list[str]:
    """Back ends usable on this machine, in :data:`BACKENDS` order."""
    return [b for b in BACKENDS if is_available(b)]


def default_backend() -> str:
    """The fastest installed open-source back end."""
    from tacos.errors import SolverUnavailableError

    for name in DEFAULT_ORDER:
        if is_available(name):
            return name
    raise SolverUnavailableError(
        "no ILP back end is installed",
        hint="pip install highspy (or ortools, or pulp); e.g. pip install 'tacos[ilp]'",
    )


def require(backend: str) -> None:
    """Raise a clear error unless ``backend`` is known and installed."""
    from tacos.errors import SolverUnavailableError, UsageError

    if backend not in PACKAGES:
        close = difflib.get_close_matches(str(backend), BACKENDS, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of {', '.join(BACKENDS)}"
        raise UsageError(f"unknown ILP back end {backend!r}", hint=hint)
    if not is_available(backend):
        raise SolverUnavailableError(
            f"ILP back end {backend!r} is not installed",
            hint=f"pip install {PACKAGES[backend]}",
        )


def solve_model(model: IlpModel, backend: str, *, time_limit: float, seed: int = 0,
                threads: int = 1, hint: list[float] | None = None) -> BackendResult:
    """Solve ``model`` (maximization) with ``backend`` within ``time_limit`` seconds."""
    require(backend)
    t0 = time.perf_counter()
    if model.n_vars == 0:
        return BackendResult("optimal", [], 0.0, 0.0, 0.0)
    if must_isolate(backend):
        status, values, obj, bound = _solve_in_subprocess(
            backend, model, time.time() + max(0.01, time_limit), int(seed), int(threads), hint)
    else:
        status, values, obj, bound = _SOLVERS[backend](
            model, t0 + max(0.01, time_limit), int(seed), int(threads), hint)
    if values is not None and not model.satisfied_by(values):
        # never trust a vector blindly (e.g. CBC interrupted inside its root LP)
        status = "time_limit" if status == "optimal" else status
        values, obj = None, None
    return BackendResult(status, values, obj, bound, time.perf_counter() - t0)


def must_isolate(backend: str) -> bool:
    """True when ``backend`` runs in a child process: its package clashes with an installed one.

    CP-SAT is isolated whenever highspy is installed and HiGHS whenever OR-Tools is, so that
    solving never makes the other library unloadable for the rest of the process (other parts
    of tacos use OR-Tools max-flow, for instance).
    """
    if os.name == "nt":  # pragma: no cover - workers talk over select()-able pipes
        return False
    other = {"cpsat": "highspy", "highs": "ortools"}.get(backend)
    return other is not None and importlib.util.find_spec(other) is not None


def _solve_in_subprocess(backend: str, model: IlpModel, wall_deadline: float, seed: int,
                         threads: int, hint: list[float] | None):
    """Run one back end in a worker interpreter that loads only this file.

    Workers persist (one per back end) so that their start-up (~0.3 s: interpreter, numpy, the
    solver library) is paid once per process; a worker that overruns the deadline by more than
    :data:`WORKER_GRACE` is killed and replaced on the next call.
    """
    from tacos.errors import ToolFailure

    matrix = {name: getattr(model, name) for name in MATRIX_FIELDS}
    payload = pickle.dumps((backend, matrix, wall_deadline, seed, threads, hint),
                           protocol=pickle.HIGHEST_PROTOCOL)
    with _WORKER_LOCK:
        proc = _WORKERS.get(backend)
        if proc is None or proc.poll() is not None:
            proc = _WORKERS[backend] = _start_worker()
        try:
            _send(proc, payload)
            answer = _receive(proc, wall_deadline + WORKER_GRACE)
        except (OSError, EOFError) as exc:
            _WORKERS.pop(backend, None)
            proc.kill()
            raise ToolFailure(f"ILP back end {backend!r} failed in its worker process ({exc})",
                              hint="run again with another back end, e.g. backend='cbc'") from exc
        except BaseException:  # Ctrl-C, SIGTERM: the worker's answer is no longer wanted
            _WORKERS.pop(backend, None)
            proc.kill()
            proc.wait()
            raise
        if answer is None:  # hung past the deadline
            _WORKERS.pop(backend, None)
            proc.kill()
            proc.wait()
            return "time_limit", None, None, None
    return pickle.loads(answer)


WORKER_GRACE = 5.0  # seconds a worker may overrun its deadline before it is killed
_WORKERS: dict[str, subprocess.Popen] = {}
_WORKER_LOCK = threading.Lock()
_WORKER_CODE = ("import importlib.util as u, sys; s = u.spec_from_file_location('_tacos_ilp', "
                "sys.argv[1]); m = u.module_from_spec(s); sys.modules['_tacos_ilp'] = m; "
                "s.loader.exec_module(m); m._worker()")


def _start_worker() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WORKER_CODE, os.path.abspath(__file__),
                             str(os.getpid())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


@atexit.register
def _stop_workers() -> None:
    for proc in list(_WORKERS.values()):
        try:
            proc.stdin.close()  # the worker exits at end of input
            proc.wait(timeout=1.0)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
    _WORKERS.clear()


def _send(proc: subprocess.Popen, payload: bytes) -> None:
    proc.stdin.write(len(payload).to_bytes(8, "big") + payload)
    proc.stdin.flush()


def _receive(proc: subprocess.Popen, wall_deadline: float) -> bytes | None:
    """One length-prefixed message from the worker, or None once ``wall_deadline`` passes."""
    fd = proc.stdout.fileno()
    buf = bytearray()
    need = 8
    size = None
    while True:
        while len(buf) < need:
            left = wall_deadline - time.time()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, max(65536, need - len(buf)))
            if not chunk:
                raise EOFError(f"worker exited with code {proc.wait()}")
            buf.extend(chunk)
        if size is None:
            size = int.from_bytes(buf[:8], "big")
            need = 8 + size
            continue
        return bytes(buf[8:need])


def _worker() -> None:
    """Worker entry point: answer length-prefixed pickled jobs from stdin until end of input.

    The protocol uses a private copy of stdout; file descriptor 1 is pointed at stderr so that
    anything a solver library prints cannot corrupt it.
    """
    _die_with_parent(int(sys.argv[2]))
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        job = pickle.loads(inp.read(int.from_bytes(head, "big")))
        backend, matrix, wall_deadline, seed, threads, hint = job
        deadline = time.perf_counter() + (wall_deadline - time.time())
        answer = _SOLVERS[backend](SimpleNamespace(**matrix), deadline, seed, threads, hint)
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(len(data).to_bytes(8, "big") + data)
        out.flush()


def _die_with_parent(parent: int) -> None:
    """``tacos.workers.die_with_parent``, loaded by file name (the worker imports no tacos)."""
    here = os.path.dirname(os.path.abspath(__file__))  # tacos/solvers/ilp
    path = os.path.join(os.path.dirname(os.path.dirname(here)), "workers.py")
    spec = importlib.util.spec_from_file_location("_tacos_workers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.die_with_parent(parent)


def _rows(model: Any):
    """``(columns, coefficients, lo, hi)`` per row of a CSR matrix."""
    starts, index, coef = model.starts, model.index, model.coef
    for r in range(len(model.row_lo)):
        a, b = starts[r], starts[r + 1]
        yield index[a:b], coef[a:b], model.row_lo[r], model.row_hi[r]


def _left(deadline: float) -> float:
    """Seconds left before ``deadline`` (at least a sliver, so a back end always starts)."""
    return max(0.01, deadline - time.perf_counter())


def _solve_highs(model: IlpModel, deadline: float, seed: int, threads: int,
                 hint: list[float] | None):
    import highspy
    import numpy as np

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("random_seed", seed)
    h.setOptionValue("threads", max(1, threads))
    h.setOptionValue("mip_rel_gap", 1e-6)
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = model.n_vars
    lp.num_row_ = len(model.row_lo)
    lp.col_cost_ = np.asarray(model.obj, dtype=float)
    lp.col_lower_ = np.asarray(model.col_lo, dtype=float)
    lp.col_upper_ = np.asarray(model.col_hi, dtype=float)
    lp.row_lower_ = np.clip(np.asarray(model.row_lo, dtype=float), -inf, inf)
    lp.row_upper_ = np.clip(np.asarray(model.row_hi, dtype=float), -inf, inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.asarray(model.starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(model.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(model.coef, dtype=float)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * model.n_vars
    lp.sense_ = highspy.ObjSense.kMaximize
    h.passModel(lp)
    if hint is not None:
        sol = highspy.HighsSolution()
        sol.col_value = list(hint)
        sol.value_valid = True
        h.setSolution(sol)
    # HiGHS checks its clock between presolve passes and overruns a little on big models
    h.setOptionValue("time_limit", _left(deadline) * HIGHS_MARGIN)
    h.run()
    st = h.getModelStatus()
    info = h.getInfo()
    has_sol = info.primal_solution_status == 2
    values = list(h.getSolution().col_value) if has_sol else None
    obj = info.objective_function_value if has_sol else None
    bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None
    if st == highspy.HighsModelStatus.kOptimal:
        return "optimal", values, obj, obj
    if st == highspy.HighsModelStatus.kInfeasible:
        return "infeasible", None, None, None
    return "time_limit", values, obj, bound


def _solve_cpsat(model: IlpModel, deadline: float, seed: int, threads: int,
                 hint: list[float] | None):
    from ortools.sat.python import cp_model

    cp = cp_model.CpModel()
    z = [cp.new_int_var(int(lo), int(hi), "") for lo, hi in zip(model.col_lo, model.col_hi,
                                                                  strict=True)]
    for cols, coefs, lo, hi in _rows(model):
        expr = cp_model.LinearExpr.weighted_sum([z[j] for j in cols], [int(a) for a in coefs])
        if math.isfinite(lo) and math.isfinite(hi):
            cp.add_linear_constraint(expr, int(math.ceil(lo)), int(math.floor(hi)))
        elif math.isfinite(hi):
            cp.add(expr <= int(math.floor(hi)))
        else:
            cp.add(expr >= int(math.ceil(lo)))
    # CP-SAT wants an integer objective: scale fractional coefficients
    scale = 1 if all(float(c).is_integer() for c in model.obj) else 1000
    nz = [(j, c) for j, c in enumerate(model.obj) if c]
    cp.maximize(cp_model.LinearExpr.weighted_sum([z[j] for j, _ in nz],
                                                 [round(c * scale) for _, c in nz]))
    if hint is not None:
        for var, val in zip(z, hint, strict=True):
            cp.add_hint(var, int(round(val)))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = _left(deadline)
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = max(1, threads)
    st = solver.solve(cp)
    if st == cp_model.INFEASIBLE:
        return "infeasible", None, None, None
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        values = [float(solver.value(v)) for v in z]
        obj = sum(model.obj[j] * values[j] for j, _ in nz)
        bound = solver.best_objective_bound / scale
        return ("optimal" if st == cp_model.OPTIMAL else "time_limit"), values, obj, bound
    return "time_limit", None, None, None


def _cbc_command(pulp: Any) -> Any:
    """PuLP's command-line CBC (a CBC on the path, else the bundled one), or None."""
    for name in ("COIN_CMD", "PULP_CBC_CMD"):
        cls = getattr(pulp, name, None)
        if cls is not None:
            with warnings.catch_warnings():  # PuLP 3 deprecates its bundled CBC
                warnings.simplefilter("ignore", DeprecationWarning)
                cmd = cls(msg=False)
            if cmd.available():
                return cmd
    return None


def _solve_cbc(model: IlpModel, deadline: float, seed: int, threads: int,
               hint: list[float] | None):
    """CBC through PuLP's model and MPS writer, run so that the deadline is enforced.

    CBC checks its own ``-sec`` limit only between phases (a long root LP overruns it), so the
    process gets SIGINT at the deadline (CBC then stops and writes its incumbent) and is killed
    if it does not stop within :data:`CBC_GRACE` seconds.
    """
    pulp = importlib.import_module("pulp")
    cmd = _cbc_command(pulp)
    if cmd is None:
        raise RuntimeError("CBC is not available through PuLP")
    prob = pulp.LpProblem("ten", pulp.LpMaximize)
    new_var = getattr(prob, "add_variable", None) or pulp.LpVariable  # PuLP >= 3.3 / older
    z = [new_var(f"z{j}", lo, hi, cat=pulp.LpInteger)
         for j, (lo, hi) in enumerate(zip(model.col_lo, model.col_hi, strict=True))]
    prob += pulp.LpAffineExpression([(z[j], c) for j, c in enumerate(model.obj) if c])
    for r, (cols, coefs, lo, hi) in enumerate(_rows(model)):
        if r % 4096 == 0 and time.perf_counter() > deadline:
            return "time_limit", None, None, None
        expr = pulp.LpAffineExpression([(z[j], a) for j, a in zip(cols, coefs, strict=True)])
        if math.isfinite(hi):
            prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintLE, rhs=hi), f"u{r}")
        if math.isfinite(lo):
            prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintGE, rhs=lo), f"l{r}")
    mps, sol, mst = cmd.create_tmp_files(prob.name, "mps", "sol", "mst")
    try:
        vs, var_names, con_names, _ = prob.writeMPS(mps, rename=1)
        args = [cmd.path, mps, "-max"]
        if hint is not None:
            for var, val in zip(z, hint, strict=True):
                var.setInitialValue(round(val))
            cmd.writesol(mst, prob, vs, var_names, con_names)
            args += ["-mips", mst]
        args += ["-sec", f"{_left(deadline):.3f}", "-timeMode", "elapsed",
                 "-threads", str(max(1, threads)), "-randomSeed", str(seed + 1),
                 "-randomCbcSeed", str(seed + 1), "-solve", "-printingOptions", "all",
                 "-solution", sol]
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=_left(deadline))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=CBC_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return "time_limit", None, None, None
        except BaseException:  # Ctrl-C, SIGTERM: stop CBC with us
            proc.kill()
            proc.wait()
            raise
        if not os.path.exists(sol) or os.path.getsize(sol) == 0:
            return "time_limit", None, None, None
        with open(sol) as fh:
            head = fh.readline()
        status, named, _, _, _, _ = cmd.readsol_MPS(sol, prob, vs, var_names, con_names)
    finally:
        cmd.delete_tmp_files(mps, sol, mst)
    if status == pulp.LpStatusInfeasible:
        return "infeasible", None, None, None
    values = [float(named.get(v.name, 0.0)) for v in z]
    obj = sum(model.obj[j] * values[j] for j in range(model.n_vars))
    if head.startswith("Optimal"):
        return "optimal", values, obj, obj
    return "time_limit", values, obj, None


def _solve_gurobi(model: IlpModel, deadline: float, seed: int, threads: int,
                  hint: list[float] | None):  # pragma: no cover - needs a licence
    gp = importlib.import_module("gurobipy")
    env = gp.Env(empty=True)
    env.setParam("OutputFlag", 0)
    env.start()
    g = gp.Model("ten", env=env)
    g.Params.Seed = seed
    g.Params.Threads = max(1, threads)
    z = [g.addVar(lb=lo, ub=hi, vtype=gp.GRB.BINARY, obj=c)
         for lo, hi, c in zip(model.col_lo, model.col_hi, model.obj, strict=True)]
    g.ModelSense = gp.GRB.MAXIMIZE
    for cols, coefs, lo, hi in _rows(model):
        expr = gp.LinExpr(list(coefs), [z[j] for j in cols])
        if math.isfinite(hi):
            g.addLConstr(expr, gp.GRB.LESS_EQUAL, hi)
        if math.isfinite(lo):
            g.addLConstr(expr, gp.GRB.GREATER_EQUAL, lo)
    if hint is not None:
        for var, val in zip(z, hint, strict=True):
            var.Start = val
    g.Params.TimeLimit = _left(deadline)
    g.optimize()
    if g.Status in (gp.GRB.INFEASIBLE, gp.GRB.INF_OR_UNBD):  # binaries: never unbounded
        return "infeasible", None, None, None
    values = [v.X for v in z] if g.SolCount > 0 else None
    obj = g.ObjVal if values is not None else None
    bound = g.ObjBound if g.SolCount > 0 else None
    status = "optimal" if g.Status == gp.GRB.OPTIMAL else "time_limit"
    return status, values, obj, bound


_SOLVERS = {"highs": _solve_highs, "cpsat": _solve_cpsat, "cbc": _solve_cbc,
            "gurobi": _solve_gurobi}
