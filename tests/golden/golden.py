"""`make golden` / `make golden-update`: run every case of `tests/golden/cases.py`, hash each
file of its run directory (wall-clock columns and keys left out, machine paths replaced by
placeholders) and compare with `tests/golden/hashes.json`.

    python -m tests.golden.golden check [CASE ...] [-j 2] [--keep DIR]
    python -m tests.golden.golden update --reason "why the stored results shift" [CASE ...]

`check` exits 1 when any file of any case differs and prints, per case, which files changed
and its fingerprint (status, rounds, virtual time, final accuracy, bytes) before and after.
`update` rewrites the hashes of the cases given (default: all) and adds the reason, with the
cases that shifted, to the current entry of docs/changelog.md.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HASHES = Path(__file__).with_name("hashes.json")
CHANGELOG = ROOT / "docs" / "changelog.md"
WALL = "wall"                  # any column or key naming wall-clock time is left out


def _scrub_text(text: str, out: Path) -> str:
    return text.replace(str(out), "<out>").replace(str(ROOT), "<root>")


def _scrub_yaml(o, out: Path):
    if isinstance(o, dict):
        return {k: _scrub_yaml(v, out) for k, v in o.items()}
    if isinstance(o, list):
        return [_scrub_yaml(v, out) for v in o]
    return _scrub_text(o, out) if isinstance(o, str) else o


def _scrub_json(o):
    if isinstance(o, dict):
        return {k: _scrub_json(v) for k, v in o.items() if WALL not in k and k != "torch_threads"}
    if isinstance(o, list):
        return [_scrub_json(v) for v in o]
    return o


def normalized(path: Path, out: Path) -> bytes:
    """The bytes of one run-directory file that the golden check compares."""
    if path.suffix == ".csv":
        import pandas as pd
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        df = df[[c for c in df.columns if WALL not in c]]
        buf = io.StringIO()
        df.to_csv(buf, index=False)
        return _scrub_text(buf.getvalue(), out).encode()
    if path.suffix == ".json":
        return json.dumps(_scrub_json(json.loads(path.read_text())), indent=1, sort_keys=True).encode()
    if path.suffix in (".yaml", ".yml"):        # parsed: a long machine path must not wrap differently
        import yaml
        return json.dumps(_scrub_yaml(yaml.safe_load(path.read_text()), out), indent=1, sort_keys=True).encode()
    if path.suffix == ".txt":
        return _scrub_text(path.read_text(), out).encode()
    return path.read_bytes()


def fingerprint(summary: dict) -> dict:
    keys = ("status", "rounds", "virtual_time", "final_test_acc", "final_test_loss", "final_gap",
            "bytes_up", "bytes_down", "grad_steps_virtual", "grad_steps_computed", "jobs_submitted")
    return {k: summary[k] for k in keys if k in summary}


def _init_worker():
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    import torch
    torch.set_num_threads(1)


def run_case(name: str, keep: str | None = None) -> dict:
    """Run one case into a fresh folder; return {files: {name: sha256}, fingerprint: {...}}."""
    import emulator
    from tests.golden.cases import CASES
    sc, over = CASES[name]
    parent = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="flemu-golden-"))
    out = parent / name
    try:
        res = emulator.run(sc if isinstance(sc, dict) else str(sc), [*over, "executor.threads=1"], out=out)
    except SystemExit as e:                      # a case that fails is recorded as failing
        return {"files": {}, "fingerprint": {"error": f"exit {e.code}"}}
    except Exception as e:                       # noqa: BLE001
        return {"files": {}, "fingerprint": {"error": f"{type(e).__name__}: {e}"[:300]}}
    files = {}
    for f in sorted(out.iterdir()):
        if f.is_file():
            files[f.name] = hashlib.sha256(normalized(f, out)).hexdigest()[:20]
    result = {"files": files, "fingerprint": fingerprint(res.summary)}
    if not keep:
        import shutil
        shutil.rmtree(parent, ignore_errors=True)
    return result


def run_all(names, jobs: int, keep: str | None) -> dict:
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
    if jobs <= 1:
        _init_worker()
        return {n: run_case(n, keep) for n in names}
    import multiprocessing as mp
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_init_worker) as pool:
        futs = {n: pool.submit(run_case, n, keep) for n in names}
        return {n: f.result() for n, f in futs.items()}


def load_stored() -> dict:
    return json.loads(HASHES.read_text()) if HASHES.exists() else {"cases": {}, "history": []}


def compare(stored: dict, got: dict) -> list[str]:
    lines = []
    for name, new in got.items():
        old = stored["cases"].get(name)
        if old is None:
            lines.append(f"{name}: not in hashes.json (new case: run `make golden-update`)")
            continue
        changed = sorted(f for f in set(old["files"]) | set(new["files"])
                         if old["files"].get(f) != new["files"].get(f))
        if changed or old["fingerprint"] != new["fingerprint"]:
            lines.append(f"{name}: {', '.join(changed) or 'fingerprint'} differ")
            for k in sorted(set(old["fingerprint"]) | set(new["fingerprint"])):
                a, b = old["fingerprint"].get(k), new["fingerprint"].get(k)
                if a != b:
                    lines.append(f"    {k}: {a} -> {b}")
    return lines


def add_to_changelog(reason: str, shifted: list[str], added: list[str]) -> None:
    text = CHANGELOG.read_text()
    lines = text.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("**"))      # the current entry
    cases = (", ".join(shifted) if len(shifted) <= 12 else f"{len(shifted)} of them") if shifted else "none"
    new = (f" Cases added: {', '.join(added)}." if 0 < len(added) <= 8 else
           f" {len(added)} cases added." if added else "")
    bullet = f"- **Golden check updated** ({datetime.date.today()}): {reason} Cases that shifted: {cases}.{new}\n"
    lines.insert(at + 1, bullet)
    CHANGELOG.write_text("".join(lines))


def main(argv=None) -> int:
    from tests.golden.cases import CASES
    p = argparse.ArgumentParser(prog="golden", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["check", "update", "list"])
    p.add_argument("cases", nargs="*", help="case names (default: all)")
    p.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--keep", help="write the run directories under this folder and keep them")
    p.add_argument("--reason", help="update: why the stored results shift (goes into docs/changelog.md)")
    a = p.parse_args(argv)
    if a.command == "list":
        print("\n".join(CASES))
        return 0
    unknown = [c for c in a.cases if c not in CASES]
    if unknown:
        print(f"unknown golden cases: {', '.join(unknown)} (see `list`)", file=sys.stderr)
        return 2
    if a.command == "update" and not (a.reason or "").strip():
        print("golden update needs --reason (REASON=... with make golden-update)", file=sys.stderr)
        return 2
    names = a.cases or list(CASES)
    got = run_all(names, a.jobs, a.keep)
    stored = load_stored()
    diffs = compare(stored, got)
    if a.command == "check":
        stale = sorted(set(stored["cases"]) - set(CASES))
        for n in stale:
            diffs.append(f"{n}: in hashes.json but no longer a case")
        if diffs:
            print("golden check: stored results differ\n" + "\n".join(diffs))
            return 1
        print(f"golden check: {len(names)} cases identical")
        return 0
    added = sorted(n for n in names if n not in stored["cases"])
    shifted = sorted({d.split(":")[0] for d in diffs if not d.startswith("    ")} - set(added))
    for n in names:
        stored["cases"][n] = got[n]
    for n in sorted(set(stored["cases"]) - set(CASES)):
        del stored["cases"][n]
    stored["cases"] = dict(sorted(stored["cases"].items()))
    stored["history"].append({"date": str(datetime.date.today()), "reason": a.reason.strip(), "shifted": shifted, "added": added})
    HASHES.write_text(json.dumps(stored, indent=1) + "\n")
    add_to_changelog(a.reason.strip(), shifted, added)
    print("\n".join(diffs) if diffs else "no case differed")
    print(f"golden update: {len(names)} cases written to {HASHES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
