"""Nothing a user types makes flemu delete or replace what it did not write (docs/bad-input.md).

Every case runs in pytest's tmp_path only (the working directory is moved there), and asserts
exit status 2, no traceback, the offending path named, and the whole tree under tmp_path
(a sentinel run, a project folder, files) byte-identical with the same mtimes afterwards.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from emulator.runs import outputs
from emulator.cli import app

from conftest import tiny

ROOT = Path(__file__).resolve().parents[1]


def snapshot(root: Path) -> dict:
    """Every entry under root: kind, bytes (files) and mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = os.lstat(p)
            data = p.read_bytes() if p.is_file() and not p.is_symlink() and Path(p).stat().st_size < 1 << 22 \
                and os.path.isfile(p) and not _is_fifo(p) else None
            out[str(p.relative_to(root))] = (st.st_mode, st.st_mtime_ns, data)
    return out


def _is_fifo(p) -> bool:
    import stat
    return stat.S_ISFIFO(os.lstat(p).st_mode)


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, r.output + (r.stderr if r.stderr_bytes is not None else ""), r.exception


def refused(code, text, exc, *named):
    assert code == 2, (code, text, exc)
    assert isinstance(exc, SystemExit), exc            # no exception escaped (no traceback)
    assert "Traceback" not in text
    for n in named:
        assert str(n) in text, (n, text)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """tmp_path as the working directory: a scenario, an earlier flemu run (runs/earlier),
    a project folder, a file, a FIFO and an empty folder."""
    monkeypatch.chdir(tmp_path)
    sc = tiny(**{"run.rounds": 1})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    earlier = tmp_path / "runs" / "earlier"
    earlier.mkdir(parents=True)
    (earlier / "summary.json").write_text(json.dumps({"name": "earlier", "status": "complete"}))
    (earlier / "config.yaml").write_text("name: earlier\n")
    (earlier / "metrics.csv").write_text("round,virtual_time\n0,0.0\n")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "thesis.tex").write_text("\\documentclass{article}\n")
    (proj / "summary.json").write_text("{}")               # looks a little like a run; is not one
    (tmp_path / "notes.txt").write_text("keep me\n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "sub").mkdir()
    return tmp_path


# --------------------------------------------------------------------------- flemu run
@pytest.mark.parametrize("name", [".", "..", "a/b", "../up", ".hidden", "", "-rf", "a b", "x" * 129])
def test_run_names_are_plain_names(project, name):
    before = snapshot(project)
    code, text, exc = cli("run", "s.yaml", "-q", "--set", f"name={name!r}" if name else "name=''")
    refused(code, text, exc, "name:", "s.yaml")
    assert snapshot(project) == before


@pytest.mark.parametrize("out", [".", "..", "sub/..", "proj", "notes.txt", "fifo", "notes.txt/run", "runs"])
def test_run_out_refuses_what_flemu_did_not_write(project, out):
    before = snapshot(project)
    code, text, exc = cli("run", "s.yaml", "-q", "--out", out)
    refused(code, text, exc, f"--out {out}", "nothing written")
    assert snapshot(project) == before


@pytest.mark.parametrize("out", [".", "../earlier", "sub/.."])
def test_run_never_replaces_the_current_directory_even_a_run_directory(project, monkeypatch, out):
    here = project / "runs" / "earlier"                # a flemu run directory, the working directory
    (here / "sub").mkdir()
    monkeypatch.chdir(here)
    before = snapshot(project)
    code, text, exc = cli("run", project / "s.yaml", "-q", "--out", out)
    refused(code, text, exc, f"--out {out}", "current directory")
    assert snapshot(project) == before


def test_sweep_never_writes_into_the_current_directory_even_an_empty_one(project, monkeypatch):
    f = sweep_file(project, ".")
    monkeypatch.chdir(project / "sub")
    before = snapshot(project)
    code, text, exc = cli("sweep", f, "-q", "-j", "1")
    refused(code, text, exc, "sweep folder .", "current directory")
    assert snapshot(project) == before


def test_output_dir_in_the_scenario_is_checked_too(project):
    before = snapshot(project)
    code, text, exc = cli("run", "s.yaml", "-q", "--set", "output.dir=proj")
    refused(code, text, exc, "output.dir proj", "not a flemu run directory")
    assert snapshot(project) == before


def test_run_refuses_a_symlink_even_to_a_run_directory(project):
    (project / "link").symlink_to(project / "runs" / "earlier")
    before = snapshot(project)
    code, text, exc = cli("run", "s.yaml", "-q", "--out", "link")
    refused(code, text, exc, "--out link", "symbolic link")
    assert snapshot(project) == before


def test_run_replaces_its_own_run_directory_and_an_empty_one(project):
    code, text, exc = cli("run", "s.yaml", "-q", "--out", "runs/earlier")      # a flemu run: replaced
    assert code == 0, text
    s = json.loads((project / "runs" / "earlier" / "summary.json").read_text())
    assert s["name"] == "tiny" and s["status"] == "complete" and s["rounds"] == 1
    (project / "empty").mkdir()
    code, text, exc = cli("run", "s.yaml", "-q", "--out", "empty")
    assert code == 0, text
    assert outputs.is_run_dir(project / "empty")
    assert (project / "proj" / "thesis.tex").exists() and (project / "notes.txt").read_text() == "keep me\n"


def test_python_api_refuses_too(project):
    import emulator
    before = snapshot(project)
    with pytest.raises(outputs.OutputError, match="proj"):
        emulator.run(tiny(**{"run.rounds": 1}), out=project / "proj")
    assert snapshot(project) == before


# --------------------------------------------------------------------------- temporary leftovers
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_next_run_removes_only_flemus_dead_leftovers(project):
    runs = project / "runs"
    dead = runs / f".tiny.tmp-{_dead_pid()}-123"
    dead.mkdir()
    (dead / "config.yaml").write_text("name: tiny\n")
    old = runs / f".tiny.old-{_dead_pid()}-5"
    old.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = runs / f".tiny.tmp-{live.pid}-7"          # another process still writing: kept
        alive.mkdir()
        keep = [runs / ".tiny.tmp-notes", runs / f".other.tmp-{_dead_pid()}-1", runs / ".tiny.tmp-1-2-x"]
        for k in keep:
            k.mkdir()
        code, text, exc = cli("run", "s.yaml", "-q")
        assert code == 0, text
        assert not dead.exists() and not old.exists()
        assert alive.exists() and all(k.exists() for k in keep)
        assert outputs.is_run_dir(runs / "tiny")
    finally:
        live.kill()
        live.wait()


KILLER = textwrap.dedent("""
    import os, signal, sys
    import emulator.runs.runner as r
    def die(*a, **k):          # SIGKILL in the middle of the final write
        os.kill(os.getpid(), signal.SIGKILL)
    r.partition_frame = die
    r.run(sys.argv[1], out=sys.argv[2])
""")


@pytest.mark.slow
def test_kill_9_during_the_final_write_is_cleaned_by_the_next_run(project):
    runs = project / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", KILLER, "s.yaml", "runs/tiny"], cwd=project, env=env,
                       capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    left = [q for q in runs.iterdir() if q.name.startswith(".tiny.tmp-")]
    assert len(left) == 1 and (left[0] / "config.yaml").exists()          # a half-written run
    assert not (runs / "tiny").exists()
    code, text, exc = cli("run", "s.yaml", "-q")
    assert code == 0, text
    assert not left[0].exists() and outputs.is_run_dir(runs / "tiny")
    assert (runs / "earlier" / "metrics.csv").exists()


# --------------------------------------------------------------------------- sweeps
def sweep_file(root: Path, out: str, name="sw") -> Path:
    f = root / "sweep.yaml"
    f.write_text(yaml.safe_dump({"name": name, "base": "s.yaml", "seeds": 1, "out": out}))
    return f


@pytest.mark.parametrize("out", ["proj", "notes.txt", ".", "sub/..", "fifo"])
def test_sweep_refuses_a_folder_it_did_not_write(project, out):
    f = sweep_file(project, out)
    before = snapshot(project)
    code, text, exc = cli("sweep", f, "-q", "-j", "1")
    refused(code, text, exc, f"sweep folder {out}", "nothing written")
    assert snapshot(project) == before


@pytest.mark.parametrize("name", ["..", ".", ".x"])
def test_sweep_names_are_plain_names(project, name):
    (project / "sweep.yaml").write_text(yaml.safe_dump({"name": name, "base": "s.yaml", "seeds": 1}))
    before = snapshot(project)
    code, text, exc = cli("sweep", "sweep.yaml", "-q", "-j", "1")
    refused(code, text, exc, "name:", "plain name")
    assert snapshot(project) == before


def test_sweep_refuses_a_run_directory_it_did_not_write(project):
    sweep = project / "study"
    (sweep / "runs" / "seed=0").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"name": "sw", "axes": []}))     # flemu's sweep folder
    (sweep / "runs" / "seed=0" / "data.npz").write_bytes(b"mine")                 # but not its run
    f = sweep_file(project, "study")
    before = snapshot(project)
    code, text, exc = cli("sweep", f, "-q", "-j", "1")
    refused(code, text, exc, "seed=0", "not a flemu run directory")
    assert snapshot(project) == before


# --------------------------------------------------------------------------- plot, report, compare
@pytest.fixture(scope="module")
def a_run(tmp_path_factory):
    import emulator
    d = tmp_path_factory.mktemp("run") / "r"
    emulator.run(tiny(**{"run.rounds": 2}), out=d)
    return d


@pytest.mark.parametrize("cmd,name", [
    (["plot", "{run}", "-o", "{t}"], "mine.png"),
    (["plot", "participation", "{run}", "-o", "{t}"], "mine.png"),
    (["plot", "{run}", "-o", "{t}"], "mine.svg"),
    (["report", "{run}", "-o", "{t}"], "mine.html"),
    (["report", "{run}", "-o", "{t}"], "mine.md"),
    (["compare", "{run}", "--csv", "{t}"], "mine.csv"),
    (["plot", "{run}", "-o", "{t}"], "pipe.png"),
    (["compare", "{run}", "--csv", "{t}"], "pipe.csv"),
])
def test_outputs_replace_only_files_flemu_wrote(project, a_run, cmd, name):
    t = project / name
    if name.startswith("pipe"):
        os.mkfifo(t)
    else:
        t.write_bytes(b"\x89PNG\r\n\x1a\n my own figure" if name.endswith(".png") else b"mine\n")
    before = snapshot(project)
    code, text, exc = cli(*[c.format(run=a_run, t=t) for c in cmd])
    refused(code, text, exc, name, "nothing written")
    assert snapshot(project) == before


def test_report_refuses_a_figures_folder_with_a_figure_it_did_not_draw(project, a_run):
    figs = project / "rep_figures"
    figs.mkdir()
    (figs / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n holiday")
    before = snapshot(project)
    code, text, exc = cli("report", a_run, "-o", project / "rep.html")
    refused(code, text, exc, "photo.png")
    assert snapshot(project) == before


@pytest.mark.slow
def test_outputs_flemu_wrote_are_replaced(project, a_run):
    (project / "rep.html").write_text(f"{outputs.REPORT_MARK}\nan older report\n")
    for cmd in (["plot", a_run, "-o", "fig.png"], ["plot", a_run, "-o", "fig.png"], ["plot", a_run, "-o", "fig.svg"],
                ["plot", a_run, "-o", "fig.svg"], ["plot", "participation", a_run, "-o", "part"],
                ["plot", "participation", a_run, "-o", "part"], ["compare", a_run, "--csv", "cmp.csv"],
                ["compare", a_run, "--csv", "cmp.csv"],
                ["report", a_run, "-o", "rep.html"],         # replaces the older report
                ["report", a_run, "-o", "rep.md"]):          # replaces the figures in rep_figures/
        code, text, exc = cli(*cmd)
        assert code == 0, (cmd, text, exc)
    for f in ("fig.png", "fig.svg", "part.png", "part.svg", "rep.html", "rep.md", "cmp.csv",
              "rep_figures/accuracy_vs_time.png", "rep_figures/accuracy_vs_time.svg"):
        assert outputs.written_by_flemu(project / f, ("runs", "failed")), f
    assert "an older report" not in (project / "rep.html").read_text()


@pytest.mark.parametrize("column,value", [("round", "abc"), ("virtual_time", "soon"), ("test_acc", "high")])
@pytest.mark.parametrize("command", ["compare", "report"])
def test_compare_and_report_name_a_bad_number(project, a_run, command, column, value):
    run = project / "copy"
    shutil.copytree(a_run, run)
    m = (run / "metrics.csv").read_text().splitlines()
    cols = m[0].split(",")
    row = m[2].split(",")
    row[cols.index(column)] = value
    m[2] = ",".join(row)
    (run / "metrics.csv").write_text("\n".join(m) + "\n")
    before = snapshot(project)
    code, text, exc = cli(command, run, *(["--csv", project / "c.csv"] if command == "compare" else []))
    refused(code, text, exc, "metrics.csv", f"column {column!r}, line 3", repr(value))
    assert snapshot(project) == before
