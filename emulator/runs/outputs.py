"""What flemu may write, replace and delete (docs/bad-input.md, "What flemu may replace").

Nothing flemu does may delete or replace what it did not write. Every command that writes
checks its targets here *before* it writes anything:

- a run directory (`flemu run`, `--out`, `output.dir`, a sweep's runs) may replace only a
  directory flemu recognises as one of its run directories (`is_run_dir`: summary.json
  holding a mapping with flemu's `name` and `status`, beside config.yaml and metrics.csv),
  or an empty directory; never a file, a device, a FIFO, a symbolic link, the current
  directory or one of its parents;
- a sweep folder may be written into only when it is new, empty, or already a flemu sweep
  folder (`is_sweep_dir`: sweep.json with the sweep's `name` and `axes`);
- a file (a plot, a report, compare.csv) may replace only a regular file that carries
  flemu's signature for its type (`written_by_flemu`); a report's figures folder may hold
  other files, but any figure in it must be flemu's (`check_figure_dir`);
- the temporary names flemu leaves when killed (`.<name>.tmp-<pid>-<ns>`, `.<name>.old-<pid>-<ns>`)
  are removed by the next write of that name, and only when their process is gone.

Run and sweep names are plain names (`check_name`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

from ..errors import FlemuError
from ..scenario.names import NAME_RE, NAME_RULE, check_name  # noqa: F401  (re-exported: run and sweep names)

#: every status a written run directory may carry (runs/outcome.py says what each means)
RUN_STATUSES = ("complete", "diverged", "stalled", "stopped", "failed", "invalid", "empty")
#: the statuses whose results `flemu compare` and `report` leave out of their tables (each named, with why)
LEFT_OUT = ("failed", "invalid", "empty")
SIGNATURE = "flemu"                       # what flemu writes into the files it makes
TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)-\d+")   # flemu's temporary names


class OutputError(FlemuError):
    """A write target is not flemu's to replace (exit status 2; nothing is written)."""


# --------------------------------------------------------------------------- recognising flemu's own
def _json_mapping(path: Path):
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 24)
        d = json.loads(data)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_run_dir(path) -> bool:
    """A directory flemu wrote as a run directory: summary.json (a mapping with flemu's `name`
    and a run `status`), config.yaml and metrics.csv, all regular files."""
    p = Path(path)
    if p.is_symlink() or not p.is_dir():
        return False
    if not all(_regular(p / f) for f in ("summary.json", "config.yaml", "metrics.csv")):
        return False
    s = _json_mapping(p / "summary.json")
    return s is not None and isinstance(s.get("name"), str) and s.get("status") in RUN_STATUSES


def is_sweep_dir(path) -> bool:
    """A folder flemu wrote as a sweep folder: sweep.json with the sweep's `name` and `axes`."""
    p = Path(path)
    if p.is_symlink() or not p.is_dir() or not _regular(p / "sweep.json"):
        return False
    m = _json_mapping(p / "sweep.json")
    return m is not None and isinstance(m.get("name"), str) and isinstance(m.get("axes"), list)


def _describe(p: Path) -> str:
    try:
        st = os.lstat(p)
    except OSError:
        return "something that cannot be read"
    mode = st.st_mode
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a device file"), (stat.S_ISBLK, "a device file"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return what
    return "not a regular file"


def _check_parents(p: Path, what: str, given=None) -> None:
    """Every existing ancestor of `p` is a directory (else mkdir would fail half-way)."""
    for a in reversed(p.parents):
        if a.exists() or a.is_symlink():
            if not a.is_dir():
                raise OutputError(f"{what} {given or p}: {a} is {_describe(a)}, not a directory; nothing written")


def _not_cwd(p: Path, given, what: str) -> Path:
    """`p` resolved; refused when it is the current directory or one of its parents."""
    r = Path(os.path.abspath(p))
    r = r.parent.resolve() / r.name if r.name else r.resolve()
    cwd = Path.cwd().resolve()
    if r.name in ("", ".", "..") or r == cwd or r in cwd.parents:
        raise OutputError(f"{what} {given}: is the current directory or one of its parents; "
                          f"give a new directory (e.g. runs/<name>); nothing written")
    return r


# --------------------------------------------------------------------------- run directories
def check_run_target(out_dir, what: str = "run directory") -> Path:
    """The resolved run directory `out_dir`, if flemu may write it (it is absent, an empty
    directory, or one of flemu's run directories); else `OutputError` naming why."""
    given = out_dir
    r = _not_cwd(Path(out_dir), given, what)
    _check_parents(r, what, given)
    if r.is_symlink():
        raise OutputError(f"{what} {given}: is a symbolic link; flemu replaces only its own run directories "
                          f"(give the link's target or a new path); nothing written")
    if not r.exists():
        return r
    if not r.is_dir():
        raise OutputError(f"{what} {given}: exists and is {_describe(r)}; flemu replaces only its own run "
                          f"directories; nothing written")
    if is_run_dir(r) or not any(r.iterdir()):
        return r
    raise OutputError(f"{what} {given}: exists and is not a flemu run directory (no summary.json, config.yaml "
                      f"and metrics.csv written by flemu); flemu replaces only its own run directories: "
                      f"give a new path; nothing written")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def temp_names(parent: Path, name: str) -> list:
    """flemu's temporary leftovers of `name` in `parent` whose process is gone."""
    out = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return out
    for p in entries:
        m = TEMP_NAME.fullmatch(p.name)
        if m and m["name"] == name and not p.is_symlink() and not _pid_alive(int(m["pid"])):
            out.append(p)
    return out


def clean_temp(parent: Path, name: str) -> int:
    """Remove the leftovers of `temp_names` (a run killed during its final write)."""
    n = 0
    for p in temp_names(parent, name):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        n += 1
    return n


# --------------------------------------------------------------------------- sweep folders
def check_sweep_target(root) -> Path:
    """The resolved sweep folder `root`, if flemu may write into it: absent, empty (or holding
    only the lock of a sweep killed before its first write), or a flemu sweep folder."""
    given = root
    r = _not_cwd(Path(root), given, "sweep folder")
    _check_parents(r, "sweep folder", given)
    if r.is_symlink():
        raise OutputError(f"sweep folder {given}: is a symbolic link; give its target or a new path; nothing written")
    if not r.exists():
        return r
    if not r.is_dir():
        raise OutputError(f"sweep folder {given}: exists and is {_describe(r)}; nothing written")
    if is_sweep_dir(r) or {p.name for p in r.iterdir()} <= {".lock"}:
        return r
    raise OutputError(f"sweep folder {given}: exists and is not a flemu sweep folder (no sweep.json written by "
                      f"flemu); flemu writes sweeps only into a new or empty folder or one of its own: "
                      f"give a new --out; nothing written")


# --------------------------------------------------------------------------- files
REPORT_MARK = "<!-- flemu report -->"     # the first line of every report flemu writes
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def written_by_flemu(path, csv_columns=()) -> bool:
    """A regular file that carries flemu's signature for its type: PNG / SVG / PDF metadata
    (`Software` / `Creator` = flemu, `plot_metadata`), a report's or timeline page's first line
    (`REPORT_MARK`), a trace's leading `otherData` writer, or for a CSV the header of the table flemu writes there (`csv_columns`, all present)."""
    p = Path(path)
    if not _regular(p):
        return False
    suffix = p.suffix.lower()
    try:
        with open(p, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    sig = SIGNATURE.encode()
    if suffix == ".png":
        return head.startswith(b"\x89PNG") and b"Software\x00" + sig in head
    if suffix == ".svg":
        return b"<dc:title>" + sig + b"</dc:title>" in head
    if suffix == ".pdf":
        return head.startswith(b"%PDF") and _pdf_signed(p, sig)
    if suffix in (".html", ".md", ".markdown"):
        return head.startswith(REPORT_MARK.encode())
    if suffix == ".json":            # a trace flemu wrote (analysis/trace_export.py): its otherData first
        return head.startswith(b'{"otherData": {"writer": "' + sig + b'"')
    if suffix == ".csv" and csv_columns:
        first = head.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        return set(csv_columns) <= {c.strip().strip('"') for c in first.split(",")}
    return False


def _pdf_signed(p: Path, sig: bytes) -> bool:
    try:
        if p.stat().st_size > (64 << 20):
            return False
        return b"/Creator (" + sig in p.read_bytes()
    except OSError:
        return False


def check_file_target(path, what: str = "output file", csv_columns=()) -> Path:
    """`path`, if flemu may write it: absent, or a regular file flemu wrote (its signature);
    else `OutputError`. Missing parent folders are fine (they are created when writing)."""
    p = Path(path)
    _check_parents(p, what)
    if p.is_symlink():
        raise OutputError(f"{what} {p}: is a symbolic link; flemu replaces only files it wrote; nothing written")
    if not p.exists():
        return p
    if written_by_flemu(p, csv_columns):
        return p
    kind = _describe(p)
    why = "was not written by flemu (it has no flemu signature)" if kind == "a file" else f"is {kind}"
    raise OutputError(f"{what} {p}: exists and {why}; flemu replaces only files it wrote: give another "
                      f"path, or move it away; nothing written")


def check_figure_dir(d, what: str = "figures folder") -> Path:
    """A folder flemu fills with figures (a report's): absent, or a directory whose figure
    files (PNG / SVG / PDF) are all flemu's; other files in it are left alone."""
    d = Path(d)
    _check_parents(d, what)
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise OutputError(f"{what} {d}: exists and is {_describe(d)}, not a folder of flemu figures; "
                          f"nothing written")
    if d.exists():
        for f in sorted(d.iterdir()):
            if f.suffix.lower() in FIGURE_SUFFIXES and not written_by_flemu(f):
                check_file_target(f, f"figure in {what}")
    return d


def plot_metadata(suffix: str) -> dict:
    """The matplotlib `savefig(metadata=...)` that signs a figure of this format."""
    s = suffix.lower().lstrip(".")
    if s == "png":
        return {"Software": SIGNATURE}
    if s in ("svg", "pdf"):
        return {"Creator": SIGNATURE}
    return {}
