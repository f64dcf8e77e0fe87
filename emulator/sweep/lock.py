"""The sweep folder's housekeeping: the driver's exclusive lock, its event journal
(events.jsonl) and the removal of a killed run's temporary leftovers."""
from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
from pathlib import Path

from ..errors import FlemuError
from ..runs.outputs import TEMP_NAME


class SweepError(FlemuError):
    """A sweep cannot start (its folder is in use, or finished runs disagree with the plan)."""


def clean_leftovers(root: Path) -> int:
    """Remove temporary names left by a killed run or driver (never a finished run)."""
    n = 0
    for sub in (root / "runs", root / "scenarios", root / "failures", root):
        if not sub.is_dir():
            continue
        for p in sub.iterdir():
            if TEMP_NAME.fullmatch(p.name) and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                n += 1
    return n


class FolderLock:
    """An exclusive flock on <sweep>/.lock (released by the kernel when the driver dies)."""

    def __init__(self, root: Path):
        self.path = Path(root) / ".lock"
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)   # close-on-exec: children never hold it
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(self.fd, 64).decode(errors="replace").strip()
            os.close(self.fd)
            raise SweepError(f"another flemu sweep is running in {self.path.parent}"
                             + (f" (pid {other})" if other else "")) from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, str(os.getpid()).encode())
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def journal(root: Path, **event) -> None:
    event = {"time": datetime.datetime.now().isoformat(timespec="milliseconds"), "pid": os.getpid(), **event}
    with open(root / "events.jsonl", "a") as f:
        f.write(json.dumps(event) + "\n")
