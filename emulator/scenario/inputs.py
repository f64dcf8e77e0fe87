"""The files a run reads, and how a replay finds them again and trusts them (docs/reliability.md,
"Replays").

A run reads data files (`npz`, `mnist_idx`), trace files (compute, link and availability
traces) and plugins. Its config.yaml records each in `inputs.files`, keyed by the YAML path
that names it: the kind, the absolute path, the path relative to the run directory (for a
file in the folder that holds both the scenario's folder, `inputs.folder`, and the run
directory: a study folder that travels whole) and the file's SHA-256.

Loading a scenario that carries `inputs` (`flemu run runs/x/config.yaml`, from any folder)
finds each file again, first by its path relative to the folder of the file being loaded,
then by its absolute path, preferring the one with the recorded hash. A data or trace file
whose hash changed is refused unless `Replay.allow_changed`; a plugin's hash is compared by
emulator/plugins.py on the very text it would run, which is never run unless `Replay.trust`
names it. A YAML path the user set anew (`--set`) is not checked.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, ValidationError

from ..errors import ScenarioError
from ..registry import Params
from .overrides import split_path
from .validation_errors import format_path

COLLECT = "input_files"        # validation-context key: {resolved path: kind} of the files read


class InputFile(Params):
    """One file the run read."""
    kind: Literal["data", "trace", "plugin"] = Field(description="data file, trace file or plugin")
    file: str = Field(description="its absolute path when the run was made")
    relative: Optional[str] = Field(None, description="its path from the run directory (a file in the folder holding both the scenario and the run directory)")
    sha256: Optional[str] = Field(None, description="SHA-256 of its bytes (a module plugin: of its file)")


class Inputs(Params):
    """The files a run read, written by flemu into config.yaml (a scenario need not give it):
    a replay finds them from any folder and refuses changed ones (docs/reliability.md)."""
    folder: Optional[str] = Field(None, description="the scenario's folder")
    files: dict[str, InputFile] = Field(default_factory=dict, description="YAML path -> the file it names")


@dataclass(frozen=True)
class Replay:
    """What a replay accepts: changed data and trace files (`--allow-changed-inputs`), and
    the changed plugins named (`--trust-changed-plugins`: module name, file name or path)."""
    allow_changed: bool = False
    trust: tuple = ()


_HASHES: dict = {}


def sha256_of(path) -> str:
    """SHA-256 of a file's bytes (kept per file version: path, inode, size, mtime)."""
    st = os.stat(path)
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    h = _HASHES.get(key)
    if h is None:
        d = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                d.update(chunk)
        h = _HASHES[key] = d.hexdigest()
    return h


def note(info, path: str, kind: str) -> None:
    """Called by a file field's validator: `path` (absolute) was read as a `kind` file."""
    found = (info.context or {}).get(COLLECT)
    if found is not None:
        found.setdefault(path, kind)


# --------------------------------------------------------------------------- recording
def _strings(node, keys=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, (*keys, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, (*keys, i))
    elif isinstance(node, str):
        yield keys, node


def record(sc, found: dict, folder) -> None:
    """Set `sc.inputs`: every file validation read (`found`: path -> kind) under each YAML
    path naming it, and every plugin with a file; None when the run reads no file."""
    from ..plugins import describe
    files = {}
    data = sc.model_dump(mode="json", exclude_none=True, exclude={"inputs", "plugins"})
    for keys, value in _strings(data):
        if value in found:
            files[format_path(keys)] = InputFile(kind=found[value], file=value, sha256=sha256_of(value))
    for i, d in enumerate(describe(sc.plugins or ())):
        if d["file"]:
            files[f"plugins[{i}]"] = InputFile(kind="plugin", file=str(d["file"]), sha256=d["sha256"])
    sc.inputs = Inputs(folder=str(folder) if folder else None, files=files) if files else None


def _study(folder: Optional[str], run_dir: str) -> Optional[Path]:
    """The folder holding both the scenario's folder and the run directory (a study that
    travels whole); None when only the filesystem root holds both."""
    if not folder:
        return None
    top = Path(os.path.commonpath([folder, run_dir]))
    return None if top == Path(top.anchor) else top


def settle(sc, out_dir) -> None:
    """What config.yaml records for a replay once the run directory is known: each input
    file under the folder holding the scenario's folder and the run directory by its path
    from the run directory (the torch thread count is the scenario's `executor.threads`,
    1 by default, written like any other value)."""
    rec = sc.inputs
    if rec is None:
        return
    run_dir = os.path.abspath(out_dir)
    top = _study(rec.folder, run_dir)
    for e in rec.files.values():
        e.relative = os.path.relpath(e.file, run_dir) if top and Path(e.file).is_relative_to(top) else None


# --------------------------------------------------------------------------- replaying
def _get(raw, keys):
    node = raw
    for k in keys:
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _set(raw, keys, value) -> None:
    node = raw
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value


def _find(entry: InputFile, here) -> tuple:
    """(path, its sha256) of a recorded file: a place it may be (relative to `here`, then
    absolute) holding the recorded bytes, else the first that exists; (None, None): none."""
    places = []
    if entry.relative and here is not None:
        places.append(os.path.normpath(os.path.join(here, entry.relative)))
    places.append(entry.file)
    existing = [p for i, p in enumerate(places) if os.path.isfile(p) and p not in places[:i]]
    for p in existing:
        if sha256_of(p) == entry.sha256:
            return p, entry.sha256
    return (existing[0], sha256_of(existing[0])) if existing else (None, None)


def _not_found(at: str, entry: InputFile, here) -> str:
    where = entry.file
    if entry.relative and here is not None:
        where += f" nor at {os.path.normpath(os.path.join(here, entry.relative))} ({entry.relative} from the run directory)"
    return (f"{entry.kind} file not found: recorded at {where}; copy it there, or give another "
            f"with --set {at}=PATH")


def _changed(at: str, entry: InputFile, path: str, now: str) -> str:
    return (f"{entry.kind} file {path} changed since the run was recorded: sha256 recorded {entry.sha256}, "
            f"now {now}; a replay reads the files it was made with: restore it, or pass "
            f"--allow-changed-inputs to run with the file as it is now")


def check(raw: dict, here, opts: Replay, source=None) -> tuple:
    """Consume `raw["inputs"]` (a replay): point each recorded YAML path the user did not
    set anew at the file found again, refusing changed data and trace files unless
    `opts.allow_changed`. Returns ({plugin spec: recorded sha256} for plugins.load, the
    scenario's folder, moved along with the files when they were found by relative path)."""
    given = raw.pop("inputs", None)
    if given is None:
        return {}, None
    try:
        rec = Inputs.model_validate(given)
    except ValidationError as e:
        err = e.errors()[0]
        raise ScenarioError([("inputs" + "".join(f".{k}" for k in err["loc"]),
                              f"{err['msg']} (flemu writes this block into config.yaml: delete it to run "
                              f"without the replay checks)")], source=source) from None
    problems, expect, folder = [], {}, rec.folder
    for at, entry in rec.files.items():
        keys = split_path(at)
        value = _get(raw, keys)
        if entry.kind == "plugin" and isinstance(value, str) and value != entry.file:
            expect[value] = entry.sha256           # a module plugin: checked before its import
            continue
        if value != entry.file:
            continue                               # set anew (--set): validated as any path
        path, now = _find(entry, here)
        if entry.kind == "plugin":                 # checked on the text plugins.load runs (a file
            path = path or entry.file              # gone may have been loaded, or shipped to a worker)
            expect[path] = entry.sha256
        elif path is None:
            problems.append((at, _not_found(at, entry, here)))
            continue
        elif now != entry.sha256 and not opts.allow_changed:
            problems.append((at, _changed(at, entry, path, now)))
        _set(raw, keys, path)
        if path != entry.file and rec.folder and folder == rec.folder:
            folder = os.path.normpath(os.path.join(os.path.dirname(path),
                                                   os.path.relpath(rec.folder, os.path.dirname(entry.file))))
    if problems:
        raise ScenarioError(problems, source=source)
    return expect, folder
