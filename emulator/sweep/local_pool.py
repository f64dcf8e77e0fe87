"""The `local` backend: every run is its own process (so a crash or an out-of-memory kill of
one run never takes the sweep down), forked from a fork server that imported torch and flemu
once; runs are in their own session (a terminal's Ctrl-C reaches only the driver). The fork
server exits the moment the driver dies, and on Linux every run process asks the kernel for
SIGKILL when the fork server dies (prctl PR_SET_PDEATHSIG): no orphan outlives a killed
driver.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _set_pdeathsig() -> None:
    """Ask the kernel for SIGKILL when this process's parent dies (Linux; elsewhere a no-op)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _child(scenario_file: str, out: str, err_file: str, log_file: str, parent: int, driver: int, cpus: int) -> None:
    """A run's process, forked from the preloaded fork server (its parent)."""
    os.setsid()                          # a terminal's Ctrl-C reaches the driver, not the runs
    _release_server()
    _set_pdeathsig()
    if os.getppid() != parent:           # the server died before prctl took effect
        os._exit(1)
    _watch(driver)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from .worker import main
    code = main([scenario_file, out, err_file, str(cpus)])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _release_server() -> None:
    """Drop this process's copy of the fork server's keep-alive pipe (CPython hands one to
    every process it forks), so the server exits as soon as the driver dies, not when the
    last run ends; with PR_SET_PDEATHSIG the runs then die with it."""
    try:
        from multiprocessing import forkserver
        fd = forkserver._forkserver._forkserver_alive_fd
        if fd is not None:
            os.close(fd)
            forkserver._forkserver._forkserver_alive_fd = None
    except (AttributeError, OSError):
        pass


def _watch(driver: int) -> None:
    """Belt and braces: a thread that kills this process when the driver process ends
    (Linux pidfd; the process-death chain above does not depend on it)."""
    import threading
    try:
        pidfd = os.pidfd_open(driver)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):
        return

    def wait():
        import select
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=wait, name="flemu-driver-watch", daemon=True).start()


def _tail(path: Path, n: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class LocalPool:
    """One process per run, forked from a fork server that has imported torch and flemu once
    (a run then starts in milliseconds instead of seconds). The chain is crash-safe: the
    server exits the moment the driver dies (its pipe from the driver closes) and every run
    process gets SIGKILL when the server dies (PR_SET_PDEATHSIG)."""

    PRELOAD = ["emulator.sweep.preload"]

    def __init__(self, root: Path, workers: int):
        import multiprocessing as mp
        self.root = Path(root)
        self.capacity = max(1, int(workers))
        self.cpus = 1                    # cores per run (the driver sets it: run_cpus)
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(self.PRELOAD)
        self.procs: dict[str, tuple] = {}
        self.server = None

    def running(self) -> list:
        return list(self.procs)

    def _server(self) -> int:
        """Start the fork server (once) and learn its pid (the run processes' parent)."""
        if self.server is None:
            from multiprocessing import forkserver
            forkserver.ensure_running()
            pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
            if pid:
                self.server = int(pid)
                return self.server
            probe = self.ctx.Process(target=_report_parent, args=(str(self.root / "logs" / ".server-pid"),))
            probe.start()
            probe.join()
            self.server = int((self.root / "logs" / ".server-pid").read_text())
            (self.root / "logs" / ".server-pid").unlink(missing_ok=True)
        return self.server

    def submit(self, plan) -> None:
        root = self.root
        log = root / "logs" / f"{plan.id}.log"
        err = root / "logs" / f"{plan.id}.error.json"
        err.unlink(missing_ok=True)
        proc = self.ctx.Process(
            target=_child, name=f"flemu-run-{plan.id}",
            args=(str((root / "scenarios" / f"{plan.id}.yaml").resolve()), str((root / "runs" / plan.id).resolve()),
                  str(err.resolve()), str(log.resolve()), self._server(), os.getpid(), self.cpus))
        proc.start()
        self.procs[plan.id] = (proc, log, err)

    def poll(self, timeout: float) -> list:
        from multiprocessing.connection import wait
        if not self.procs:
            return []
        wait([p.sentinel for p, _, _ in self.procs.values()], timeout=timeout)
        out = []
        for rid, (proc, log, err) in list(self.procs.items()):
            if proc.exitcode is None:
                continue
            del self.procs[rid]
            out.append(self._outcome(rid, proc.exitcode, log, err))
        return out

    def _outcome(self, rid, rc, log, err) -> dict:
        if rc == 0:
            return {"id": rid, "ok": True}
        rec = {}
        try:
            rec = json.loads(err.read_text())
        except (OSError, ValueError):
            pass
        err.unlink(missing_ok=True)
        if rc < 0:
            sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
            why = f"the run's process was killed by {sig}" + (" (out of memory?)" if -rc == signal.SIGKILL else "")
            rec = {"type": "Killed", "error": why}
        return {"id": rid, "ok": False, "error": rec.get("error") or f"exit status {rc}", "type": rec.get("type"),
                "detail": rec.get("detail") or _tail(log), "exit_code": rc}

    def close(self) -> None:
        for rid, (proc, _, _) in list(self.procs.items()):
            if proc.exitcode is None:
                proc.kill()
            proc.join()
        self.procs.clear()


def _report_parent(path: str) -> None:
    with open(path, "w") as f:
        f.write(str(os.getppid()))
