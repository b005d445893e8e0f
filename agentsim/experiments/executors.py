"""Executors: run many :class:`~agentsim.experiments.runs.RunTask` and yield outcomes as they finish.

* :class:`LocalExecutor` - a process pool on this machine (default: all cores). With one
  worker it runs in this process (no pool start-up, easiest to debug).
* :class:`DaskExecutor` - dask.distributed: ``"local"`` starts a LocalCluster whose scheduler
  and workers are separate processes, over TLS with a temporary certificate;
  ``"tls://HOST:PORT"`` connects to an existing scheduler (``tcp://`` only on request).
  Workers need agentsim importable (same environment); they need no shared files because
  tasks carry resolved scenarios and outcomes carry the results.

Both call the same pure function :func:`~agentsim.experiments.runs.execute_run`, so a sweep gives
identical results (wall-clock keys aside) whichever executor runs it. Completion order differs;
callers must not depend on it.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Iterable, Iterator

from agentsim.errors import InputError
from agentsim.experiments.runs import RunOutcome, RunTask, execute_run


def _pool_context():
    """How pool workers start.

    ``fork`` when this process runs a single Python thread: the workers inherit the already
    imported engine, so a pool starts in about 0.1 s instead of each worker spending seconds
    importing numpy/pandas/scipy (which ate most of the 2-worker gain on short sweeps). With
    other threads alive (forking them is unsafe) ``forkserver`` with the engine preloaded, else
    ``spawn`` where neither exists.
    """
    import multiprocessing
    import threading

    import agentsim.engine.simulation  # noqa: F401 - imported once here, inherited by forked workers

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["agentsim.engine.simulation", "agentsim.experiments.runs"])
        return context
    return multiprocessing.get_context("spawn")


#: prctl option: the signal this process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this worker when the process that started it dies.

    A pool worker is otherwise orphaned when the sweep is killed with SIGKILL (no ``finally``
    runs there) and keeps computing a run nobody will read, minutes later. ``prctl`` is
    Linux-only; elsewhere this does nothing. If the sweep died before the request took effect,
    the worker leaves at once."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        os._exit(1)
    except PermissionError:  # pragma: no cover - a pid reused by another user's process
        os._exit(1)


def _worker_setup(parent_pid: int) -> None:
    """Pool worker initializer: die with the sweep, leave interrupts to it."""
    _die_with_parent(parent_pid)
    _worker_ignores_interrupts()


def _worker_ignores_interrupts() -> None:
    """Pool worker initializer: leave Ctrl-C and termination to the parent.

    Ctrl-C reaches the whole process group, and forked workers inherit the parent's handlers
    (the sweep turns SIGTERM into KeyboardInterrupt). A worker that caught either would try to
    send the exception back through the result pipe that nobody reads any more once the parent
    has stopped, and hang there holding the terminal's pipes open. So a worker ignores SIGINT
    and dies at once on SIGTERM, which is how the parent stops it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


#: Seconds a terminated worker gets to exit before it is killed.
WORKER_STOP_GRACE_S = 5.0


def _stop_workers(processes) -> None:
    """Terminate pool workers and wait for them, killing any that outlive the grace period."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(WORKER_STOP_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join(WORKER_STOP_GRACE_S)


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class LocalExecutor:
    """Process pool on this machine."""

    def __init__(self, workers: int | None = None):
        if workers is not None and workers < 1:
            raise InputError(f"--workers must be at least 1, got {workers}", "command line")
        self.workers = workers or default_workers()
        self.description = f"local process pool, {self.workers} worker{'s' if self.workers != 1 else ''}"

    def run(self, tasks: Iterable[RunTask]) -> Iterator[RunOutcome]:
        tasks = list(tasks)
        if not tasks:
            return
        if self.workers == 1 or len(tasks) == 1:
            for task in tasks:
                yield execute_run(task)
            return
        from concurrent.futures import ProcessPoolExecutor, as_completed

        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)), mp_context=_pool_context(),
                                   initializer=_worker_setup, initargs=(os.getpid(),))
        finished = False
        try:
            futures = [pool.submit(execute_run, task) for task in tasks]
            for future in as_completed(futures):
                yield future.result()
            finished = True
        finally:
            if not finished:
                # Interrupted (Ctrl-C, SIGTERM, consumer stopped): drop queued tasks and stop the
                # workers now; runs in flight are lost, finished ones were persisted by the caller.
                _stop_workers(list((pool._processes or {}).values()))
            pool.shutdown(wait=finished, cancel_futures=True)

    def close(self) -> None:
        pass


#: Set to 1 to let ``--dask tcp://...`` connect to a scheduler without TLS (a trusted network).
DASK_INSECURE_ENV = "AGENTSIM_DASK_INSECURE"


def _local_security():
    """TLS with a throw-away CA and certificate shared by this process, the scheduler and the
    workers (``Security.temporary``, which needs ``cryptography``): another local process cannot
    attach to the cluster and run code in the sweep, as it could on plain loopback TCP."""
    from distributed.security import Security

    try:
        return Security.temporary()
    except ImportError as exc:
        raise InputError(f"a local Dask cluster is secured with TLS, which needs the 'cryptography' package ({exc}); "
                         "install it (pip install cryptography)", "--dask") from None


class DaskExecutor:
    """dask.distributed client over a LocalCluster (``"local"``, TLS with a temporary
    certificate) or an existing scheduler address (``tls://`` with the security of the dask
    configuration; plain ``tcp://`` only when :data:`DASK_INSECURE_ENV` says so)."""

    def __init__(self, address: str, workers: int | None = None):
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - dask is a dependency
            raise InputError(f"dask.distributed is not installed ({exc})", "--dask") from None
        self.cluster = None
        if address == "local":
            n = workers or default_workers()
            security = _local_security()
            # processes=True: the scheduler's workers are separate processes (no GIL sharing).
            # Worker processes start with SIGINT ignored (inherited through fork and exec):
            # Ctrl-C reaches the whole process group, and only this process should act on it,
            # closing the cluster in order instead of every nanny printing its own traceback.
            # silence_logs=CRITICAL: when the cluster closes after Ctrl-C, a worker whose
            # heartbeat meets the closed scheduler logs it with logger.exception (ERROR, with a
            # traceback) on the terminal; a task's own failure still reaches this process as
            # the exception future.result() raises, so no run's error is hidden by this.
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                            dashboard_address=None, silence_logs=logging.CRITICAL,
                                            security=security, protocol="tls://")
            finally:
                signal.signal(signal.SIGINT, previous)
            self.client = Client(self.cluster, security=security)
            self.description = f"dask LocalCluster over TLS, {n} worker processes"
        else:
            check_dask_address(address)
            try:
                self.client = Client(address, timeout="15s")
            except (OSError, TimeoutError, TypeError, ValueError) as exc:
                raise InputError(f"cannot connect to the Dask scheduler ({exc})", "--dask", address) from None
            self.description = f"dask scheduler {address}"

    def run(self, tasks: Iterable[RunTask]) -> Iterator[RunOutcome]:
        from dask.distributed import as_completed

        tasks = list(tasks)
        if not tasks:
            return
        # pure=False: identical tasks are still separate runs; keys are unique per submission.
        futures = self.client.map(execute_run, tasks, pure=False)
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            self.client.cancel(futures)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def check_dask_address(address: str) -> None:
    """Raise InputError (``--dask``) unless ``address`` is ``local`` or a scheduler address this
    process may trust; checked without connecting, so a dry run checks it too."""
    if address == "local":
        return
    if not address.startswith(("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")):
        raise InputError(f"expected 'local' or a scheduler address like tls://HOST:8786, got {address!r}", "--dask")
    if not address.startswith(("tls://", "wss://")) and os.environ.get(DASK_INSECURE_ENV) != "1":
        # Tasks and results travel as pickles: whoever runs that scheduler, or can reach
        # its port, runs code in this process. Only TLS authenticates both ends.
        raise InputError(f"{address} is not encrypted or authenticated, and results come back as pickles "
                         "(whoever can reach that scheduler runs code here); use tls://HOST:PORT with the "
                         "distributed.comm.tls settings of the dask configuration, or set "
                         f"{DASK_INSECURE_ENV}=1 on a network you trust", "--dask")


def make_executor(workers: int | None = None, dask: str | None = None):
    """The executor the command line asked for (Dask if ``dask`` is given, else local)."""
    if dask:
        return DaskExecutor(dask, workers)
    return LocalExecutor(workers)
