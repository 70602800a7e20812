"""Where fanned-out work runs: in this process, on a local process pool, or on a Dask cluster.

Greedy trials (:mod:`tacos.solvers.greedy.solver`) and the sizes of a sweep
(:func:`tacos.sweep.sweep`) are independent tasks ``fn(shared, item)``: ``shared`` is the data
every task reads (the problem), ``item`` what one task does (a trial, a size).  An
:class:`Engine` runs them and yields ``(index, result)`` pairs as tasks finish; callers combine
the results in an order that does not depend on which finished first (the greedy keeps the
smallest ``(makespan, trial, cap)``, a sweep puts each size in its row), so the same seed gives
the same bytes whatever the engine:

* :class:`SerialEngine` -- one task after the other in this process;
* :class:`PoolEngine` -- a local pool of forked processes (``workers`` > 1, the default);
* :class:`DaskEngine` -- the workers of an existing Dask distributed cluster, when the user
  gives its scheduler's address (``cluster='tcp://host:8786'``, ``tacosc --cluster``, or
  ``TACOS_CLUSTER`` on the command line).  Its workers must run the same tacos version (it is
  checked when connecting).  Dask is an optional dependency (``pip install 'tacos[cluster]'``)
  imported only when a cluster is used.

Ray is not a back end: its wheel is an 80 MB native build and it pins its own gRPC stack,
while Dask's distributed scheduler is pure Python (2.5 MB) and already speaks to the clusters
the HPC and cloud launchers (dask-jobqueue, dask-kubernetes) start.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tacos.errors import ClusterError
from tacos.workers import die_with_parent

CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a cluster's scheduler (and for its first worker) before giving up."""

CLUSTER_ENV = "TACOS_CLUSTER"
"""Environment variable ``tacosc`` reads as the default of ``--cluster``."""

CLUSTER_HINT = ("start one with `dask scheduler` and `dask worker tcp://HOST:8786` "
                "(same Python and tacos on every machine), or leave --cluster out to run on "
                "this machine's cores")

Task = Callable[[Any, Any], Any]


class Engine:
    """Runs ``fn(shared, item)`` for every item; see the module doc."""

    name = "engine"
    slots = 1
    """How many tasks run at once."""

    def imap(self, fn: Task, shared: Any, items: Sequence[Any],
             deadline: float | None = None) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, fn(shared, items[index]))`` as tasks finish.

        ``fn`` must be a module-level function (it is pickled by name).  After ``deadline``
        (a :func:`time.perf_counter` value) no further result is waited for once one is in
        hand; tasks not yet finished are cancelled when the iterator is closed or exhausted.
        An exception of a task is raised here.
        """
        raise NotImplementedError


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() >= deadline


class SerialEngine(Engine):
    """Every task in this process, in item order."""

    name = "serial"

    def imap(self, fn: Task, shared: Any, items: Sequence[Any],
             deadline: float | None = None) -> Iterator[tuple[int, Any]]:
        for i, item in enumerate(items):
            if i and _late(deadline):
                return
            yield i, fn(shared, item)


class PoolEngine(Engine):
    """A pool of ``workers`` forked processes, started for one :meth:`imap` and ended with it.

    The pool is terminated (workers killed at once) on any exception, Ctrl-C and SIGTERM
    included, and when the deadline passes with a result in hand; workers ignore SIGINT (the
    parent stops them) and die with the parent (Linux ``PR_SET_PDEATHSIG``).  ``shared``
    reaches the workers by the fork, not by pickling.
    """

    name = "processes"

    def __init__(self, workers: int) -> None:
        self.slots = max(1, int(workers))

    def imap(self, fn: Task, shared: Any, items: Sequence[Any],
             deadline: float | None = None) -> Iterator[tuple[int, Any]]:
        if not items:
            return
        ctx = mp.get_context("fork")
        pool = ctx.Pool(min(self.slots, len(items)), initializer=_init_worker,
                        initargs=(fn, shared, os.getpid()))
        try:
            answers = pool.imap_unordered(_pool_call, list(enumerate(items)))
            got = 0
            for _ in items:
                wait = None
                if got and deadline is not None:
                    wait = max(0.0, deadline - time.perf_counter())
                try:
                    answer = answers.next(wait)
                except mp.TimeoutError:
                    break
                got += 1
                yield answer
            pool.close()
        finally:
            pool.terminate()
            pool.join()


_WORKER: dict[str, Any] = {}


def _init_worker(fn: Task, shared: Any, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool on Ctrl-C
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler: just end
    die_with_parent(parent)
    _WORKER.update(fn=fn, shared=shared)


def _pool_call(job: tuple[int, Any]) -> tuple[int, Any]:
    i, item = job
    return i, _WORKER["fn"](_WORKER["shared"], item)


class DaskEngine(Engine):
    """The workers of a Dask distributed cluster (``client``: a ``distributed.Client``).

    ``shared`` is sent to every worker once per :meth:`imap` (``scatter(broadcast=True)``);
    each item is one task, and results are fetched as tasks finish.
    """

    name = "dask"

    def __init__(self, client: Any) -> None:
        self.client = client
        self.slots = max(1, sum(w.get("nthreads", 1) for w in
                                client.scheduler_info().get("workers", {}).values()))

    def imap(self, fn: Task, shared: Any, items: Sequence[Any],
             deadline: float | None = None) -> Iterator[tuple[int, Any]]:
        from distributed import wait

        client = self.client
        run = uuid.uuid4().hex[:12]
        [data] = client.scatter([shared], broadcast=True, hash=False)  # one object
        futures = [client.submit(_dask_call, fn, data, i, item, key=f"tacos-{run}-{i}",
                                 pure=False) for i, item in enumerate(items)]
        pending = set(futures)
        got = 0
        try:
            while pending:
                timeout = None
                if got and deadline is not None:
                    timeout = max(0.0, deadline - time.perf_counter())
                try:
                    with client.as_current():
                        done, pending = wait(pending, timeout=timeout,
                                             return_when="FIRST_COMPLETED")
                except TimeoutError:
                    break
                for fut in sorted(done, key=futures.index):
                    got += 1
                    answer = fut.result()
                    fut.release()  # the scheduler may forget it now
                    yield answer
        finally:
            if pending:
                client.cancel(list(pending))
            data.release()


def _dask_call(fn: Task, shared: Any, i: int, item: Any) -> tuple[int, Any]:
    return i, fn(shared, item)


def _tacos_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tacos")
    except PackageNotFoundError:
        return "?"


_CLIENTS: dict[str, Any] = {}


def connect(address: str, timeout: float | None = None) -> Any:
    """A ``distributed.Client`` for the scheduler at ``address`` (kept for later calls).

    Raises :class:`~tacos.errors.ClusterError` with a hint when Dask is not installed, the
    address is not a Dask scheduler's, nothing answers there within ``timeout`` seconds (default
    :data:`CONNECT_TIMEOUT`), the cluster has no worker, or its workers run another tacos
    version.
    """
    address = str(address).strip()
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    if address.startswith("ray://"):
        raise ClusterError(f"--cluster {address}: Ray clusters are not supported, only Dask "
                           "schedulers (tcp://HOST:8786)", hint=CLUSTER_HINT)
    client = _CLIENTS.get(address)
    if client is not None and client.status == "running":
        return client
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError("running on a cluster needs Dask's distributed scheduler, which is "
                           "not installed", hint="pip install 'tacos[cluster]'") from None
    from distributed.comm import parse_address, parse_host_port
    from distributed.comm.registry import backends

    try:  # checked before a Client exists: a half-built one hangs on the way out
        scheme, where = parse_address(address)
        if scheme not in backends:
            raise ValueError(f"unknown scheme {scheme}://; known: "
                             + ", ".join(f"{k}://" for k in sorted(backends)))
        if scheme in ("tcp", "tls"):
            parse_host_port(where)
    except (ValueError, TypeError) as exc:
        raise ClusterError(f"--cluster {address!r} is not a scheduler address "
                           f"({_first_line(exc)})", hint="e.g. tcp://10.0.0.5:8786") from None
    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"cannot reach a Dask scheduler at {address} within {timeout:g} s "
                           f"({_first_line(exc)})", hint=CLUSTER_HINT) from None
    try:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except TimeoutError:
            raise ClusterError(f"the Dask scheduler at {address} has no worker",
                               hint=f"start workers with `dask worker {address} --nthreads 1` "
                                    "(same Python and tacos as here)") from None
        mine = _tacos_version()
        try:
            versions = client.run(_tacos_version)
        except Exception as exc:  # noqa: BLE001 - any failure here means a broken worker
            raise ClusterError(f"the workers of {address} cannot run tacos "
                               f"({_first_line(exc)})",
                               hint="install the same tacos on every worker") from None
        other = {w: v for w, v in versions.items() if v != mine}
        if other:
            w, v = sorted(other.items())[0]
            raise ClusterError(f"worker {w} of {address} runs tacos {v}, this is {mine}",
                               hint="install the same tacos on every worker: the same seed "
                                    "gives the same schedule only with the same code")
    except BaseException:
        client.close()
        raise
    _CLIENTS[address] = client
    return client


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def close_clients() -> None:
    """Close the cluster connections :func:`connect` kept."""
    for client in list(_CLIENTS.values()):
        try:
            client.close()
        except Exception:  # noqa: BLE001, S110 - closing at exit must not fail
            pass
    _CLIENTS.clear()


atexit.register(close_clients)


def engine_for(workers: int | None = None, cluster: Any = None, *,
               tasks: int | None = None) -> Engine:
    """The engine for ``tasks`` tasks: a cluster's (``cluster``: a scheduler address or a
    ``distributed.Client``) when given, else a process pool of ``workers`` (default: every
    core), else -- one worker or one task -- this process."""
    if cluster is not None and cluster != "":
        client = cluster if hasattr(cluster, "submit") else connect(cluster)
        return DaskEngine(client)
    n = int(workers or os.cpu_count() or 1)
    if tasks is not None:
        n = min(n, tasks)
    if n <= 1 or "fork" not in mp.get_all_start_methods():
        return SerialEngine()
    return PoolEngine(n)


__all__ = ["CLUSTER_ENV", "DaskEngine", "Engine", "PoolEngine", "SerialEngine", "close_clients",
           "connect", "engine_for"]
