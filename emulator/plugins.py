"""Plugins: Python files or modules whose import registers components (docs/write-your-own.md).

Three ways in, all loaded before a scenario validates, in every process that validates or
runs (CLI, Python API, sweep workers local and on Ray, replays):

- `plugins: [my_algos.py, mypkg.fl]` in a scenario: a name ending in `.py` or holding a `/` is a
  file, relative to the scenario file; anything else is a module (imported as usual, with the
  scenario's folder also searched);
- `--plugin FILE_OR_MODULE` on the command line (files relative to the working directory);
- installed packages declaring the entry-point group `flemu.plugins` (loaded with the built-ins).

A loaded file plugin is recorded by its absolute path and its hash (`config.yaml` then
replays from any folder, and a replay never runs a plugin whose text changed unless trusted:
emulator/scenario/inputs.py) and its text is kept, so that a sweep can ship it with each Ray task: a worker node
runs the shipped text (`receive`), never needing the file itself. A failed import is one
`ScenarioError` naming the plugin and the YAML path that named it.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from .errors import ScenarioError
from .registry import RegistrationError

ENTRY_POINT_GROUP = "flemu.plugins"


@dataclass
class Loaded:
    spec: str                  # as recorded: an absolute file path or a module name
    file: Optional[str]        # the file whose text ran (a module's __file__)
    sha256: Optional[str]
    source: Optional[str]      # a file plugin's text (shipped to Ray workers)


_LOADED: dict[str, Loaded] = {}      # recorded spec -> what ran
_SHIPPED: dict[str, str] = {}        # absolute path -> text received with a task


def is_file(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def resolve(spec: str, base_dir=None) -> str:
    """A file plugin's absolute path (relative to `base_dir`, else the working directory);
    a module name as it is."""
    if not is_file(spec):
        return spec
    p = Path(spec).expanduser()
    if not p.is_absolute():
        p = Path(base_dir or ".") / p
    return str(p.resolve())


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _file_sha(file) -> str:
    """SHA-256 of a module plugin's file, read afresh (a replay compares it before importing)."""
    return hashlib.sha256(Path(file).read_bytes()).hexdigest()


def _origin_of(e: BaseException, file: Optional[str]) -> str:
    """' (at FILE:LINE)' of the innermost frame inside the plugin, if any."""
    frames = traceback.extract_tb(e.__traceback__)
    inside = [f for f in frames if file and f.filename == file] or frames[-1:]
    return f" (at {inside[-1].filename}:{inside[-1].lineno})" if inside else ""


def _run_file(path: str, text: str) -> None:
    from . import registry
    name = "flemu_plugin_" + "".join(c if c.isalnum() else "_" for c in Path(path).stem) + "_" + \
        hashlib.sha1(path.encode()).hexdigest()[:8]
    spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = path
    sys.modules[name] = mod
    prev, registry._origin = registry._origin, path
    try:
        exec(compile(text, path, "exec"), mod.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        registry._origin = prev


class ChangedPlugin(Exception):
    """A replayed plugin whose text is not the one the run recorded (never imported)."""


def _refuse_changed(spec: str, file: str, expect: Optional[str], now: str, trust) -> None:
    """`ChangedPlugin` unless the plugin's text is the recorded one or `trust` names it (its
    module name, file name, stem or path)."""
    if expect is None or now == expect:
        return
    p = Path(file)
    if any(t in (spec, p.name, p.stem) or str(Path(t).expanduser().resolve()) == file for t in trust):
        return
    raise ChangedPlugin(f"changed since the run was recorded ({file}): sha256 recorded {expect}, now {now}; "
                        f"a replay never imports a changed plugin: read it, then pass "
                        f"--trust-changed-plugins {p.name if is_file(spec) else spec} to run it as it is now")


def _load_file(path: str, expect: Optional[str] = None, trust=()) -> Loaded:
    text = _SHIPPED.get(path)
    if text is None:
        try:
            text = Path(path).read_text()
        except OSError:
            if path in _LOADED and expect in (None, _LOADED[path].sha256):
                return _LOADED[path]     # loaded here before (its text is kept): nothing new to run
            raise FileNotFoundError(f"plugin file not found: {path}") from None
    _refuse_changed(path, path, expect, _sha(text), trust)
    done = _LOADED.get(path)
    if done is not None and done.sha256 == _sha(text):
        return done
    _run_file(path, text)
    _LOADED[path] = Loaded(path, path, _sha(text), text)
    return _LOADED[path]


def _module_file(name: str, search: list) -> Optional[str]:
    """The file module `name` would be imported from, found without importing anything
    (not its parent packages either)."""
    from importlib.machinery import PathFinder
    spec, parts = None, name.split(".")
    for i in range(len(parts)):
        spec = PathFinder.find_spec(".".join(parts[:i + 1]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    return spec.origin if spec is not None and spec.has_location else None


def _load_module(name: str, base_dir=None, expect: Optional[str] = None, trust=()) -> Loaded:
    from . import registry
    if name in _LOADED:
        return _LOADED[name]
    extra = str(Path(base_dir).resolve()) if base_dir is not None else None
    if expect is not None and name not in sys.modules:
        file = _module_file(name, [*sys.path, *([extra] if extra else [])])
        if file is not None and Path(file).is_file():
            _refuse_changed(name, file, expect, _file_sha(file), trust)
    added = extra is not None and extra not in sys.path
    if added:
        sys.path.append(extra)
    prev, registry._origin = registry._origin, name
    try:
        mod = importlib.import_module(name)
    finally:
        registry._origin = prev
        if added:
            sys.path.remove(extra)
    file = getattr(mod, "__file__", None)
    sha = _file_sha(file) if file and Path(file).is_file() else None
    _LOADED[name] = Loaded(name, file, sha, None)
    return _LOADED[name]


def load(specs: Iterable[str], base_dir=None, where: str = "plugins", source: Optional[str] = None,
         expect: Optional[dict] = None, trust=()) -> list:
    """Import every plugin of `specs` (once each); returns their recorded forms (absolute
    paths for files). A plugin that cannot be imported raises one ScenarioError naming it,
    at `where[i]` (its YAML path), with `source` (the scenario file). `expect`: {spec:
    sha256} a replay recorded; a plugin whose text differs is not imported unless `trust`
    names it (emulator/scenario/inputs.py)."""
    out, problems = [], []
    for i, spec in enumerate(specs):
        at = f"{where}[{i}]" if where == "plugins" else where
        if not isinstance(spec, str) or not spec.strip():
            problems.append((at, f"a plugin is a .py file or a module name, got {spec!r}"))
            continue
        resolved = resolve(spec, base_dir)
        sha = (expect or {}).get(resolved if is_file(spec) else spec)
        try:
            got = _load_file(resolved, sha, trust) if is_file(spec) else _load_module(spec, base_dir, sha, trust)
        except (FileNotFoundError, ChangedPlugin) as e:
            problems.append((at, f"plugin {spec!r}: {e}"))
            continue
        except BaseException as e:       # noqa: BLE001 - any failure of the user's code is reported
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            file = resolved if is_file(spec) else None
            if isinstance(e, RegistrationError):     # a component refused: what is missing, and where
                problems.append((at, f"plugin {spec!r}: {e}{_origin_of(e, file)}"))
                continue
            problems.append((at, f"cannot import plugin {spec!r}"
                                 f"{' (' + resolved + ')' if file and resolved != spec else ''}: "
                                 f"{type(e).__name__}: {e}{_origin_of(e, file)}"))
            continue
        out.append(got.spec)
    if problems:
        raise ScenarioError(problems, source=source)
    return out


def load_for(raw: dict, extra: Iterable[str], base_dir, source: Optional[str], expect=None, trust=()) -> None:
    """Import a scenario mapping's `plugins` (relative to `base_dir`; a replay's with the
    hashes it recorded, `expect`) and the `extra` ones (the command line's: relative to the
    working directory); record them resolved in `raw`."""
    given = raw.get("plugins")
    if given is not None and not isinstance(given, list):
        raise ScenarioError([("plugins", f"a list of .py files or module names, got {given!r}")], source=source)
    found = load(given or [], base_dir, "plugins", source, expect, trust)
    for spec in extra or ():
        found = merge(found, load([spec], None, f"--plugin {spec}", source))
    if found:
        raw["plugins"] = found


def merge(*lists: Iterable[str]) -> list:
    """The plugins of several lists, each once, in order."""
    out: list = []
    for lst in lists:
        for s in lst or ():
            if s not in out:
                out.append(s)
    return out


def describe(specs: Iterable[str]) -> list:
    """[{plugin, file, sha256}] of loaded plugins, for summary.json."""
    out = []
    for s in specs:
        got = _LOADED.get(s)
        out.append({"plugin": s, "file": got.file if got else None, "sha256": got.sha256 if got else None})
    return out


def bundle(specs: Iterable[str]) -> dict:
    """{absolute path: text} of the file plugins among `specs`, to ship with a task."""
    return {s: _LOADED[s].source for s in specs if s in _LOADED and _LOADED[s].source is not None}


def receive(files: dict) -> None:
    """Make shipped plugin texts the ones `load` runs for their paths (a Ray worker)."""
    _SHIPPED.update(files or {})


def module_roots(specs: Iterable[str]) -> list:
    """Folders of module plugins that are not installed packages (shipped to Ray as py_modules)."""
    roots = []
    for s in specs:
        got = _LOADED.get(s)
        if got is None or is_file(s) or not got.file:
            continue
        top = sys.modules.get(s.split(".")[0])
        f = getattr(top, "__file__", None)
        if not f or "site-packages" in f or "dist-packages" in f:
            continue
        p = Path(f)
        root = str(p.parent if p.name == "__init__.py" else p)
        if root not in roots:
            roots.append(root)
    return roots


def load_entry_points() -> None:
    """Import the installed plugins (entry-point group `flemu.plugins`); a broken one is an
    error naming its package."""
    from importlib.metadata import entry_points
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        from . import registry
        prev, registry._origin = registry._origin, f"{ep.value} (entry point {ep.name})"
        try:
            ep.load()
        except Exception as e:           # noqa: BLE001
            raise ScenarioError([(f"entry point {ENTRY_POINT_GROUP}:{ep.name}",
                                  f"cannot import plugin {ep.value!r}: {type(e).__name__}: {e}")]) from None
        finally:
            registry._origin = prev
