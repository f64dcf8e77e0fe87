"""The docs' code runs (issue 30): every fenced ```bash and ```python block of the pages
listed in PAGES is executed, in page order, in an empty folder that holds a link to the
repository's `scenarios/` (and `docs/`, for pages that read their own examples). Python blocks
share one namespace per page, as a reader pasting them into one session would; bash blocks run
with `bash -euo pipefail` and `flemu` of this environment first on PATH. A renamed option or
a changed API breaks this test, not a reader.

Bash blocks made only of `flemu ...` lines and `cat > FILE <<'END'` here-documents run in this
process through the CLI's own entry point (`emulator.cli:app`, what the `flemu` script calls),
saving a Python and torch start per command; any other bash block runs in bash.

Blocks in any other language (```text, ```yaml, ```console, or none) are shown, not run.
To add a page, append it to PAGES (docs/write-your-own.md and docs/local-training.md are
meant to be; a page listed must hold at least one block to run).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["docs/getting-started.md", "docs/selection.md"]
RUN = ("bash", "python")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)


def blocks(text: str) -> list:
    """[(language, code, line)] of the fenced blocks of a Markdown page, in order."""
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def test_blocks_are_found_in_order():
    text = "a\n```bash\necho 1\n```\n\n```text\nnot run\n```\n```python\nx = 1\n```\n"
    assert blocks(text) == [("bash", "echo 1\n", 2), ("text", "not run\n", 6), ("python", "x = 1\n", 9)]


HEREDOC = re.compile(r"^cat > (\S+) <<'(\w+)'\n(.*?)^\2\n", re.S | re.M)


def _commands(src: str) -> list:
    """A bash block as [("file", name, text) | ("flemu", argv)], or None if it holds anything
    else (then it runs in bash)."""
    import shlex
    out, rest = [], src
    while rest.strip():
        m = HEREDOC.match(rest)
        if m:
            out.append(("file", m.group(1), m.group(3)))
            rest = rest[m.end():]
            continue
        line, _, rest = rest.partition("\n")
        if not line.strip():
            continue
        argv = shlex.split(line, comments=True)
        if not argv or argv[0] != "flemu" or any(ch in line for ch in "|;&$`<>"):
            return None
        out.append(("flemu", argv[1:]))
    return out


def in_process(src: str) -> bool:
    """Blocks of `flemu ...` lines and `cat > FILE <<'END'` here-documents run in this process
    (the console script `flemu` is `emulator.cli:app`), which saves a Python and torch start per
    command; anything else runs in bash."""
    return _commands(src) is not None


def run_in_process(src: str, workdir: Path, where: str) -> None:
    from typer.testing import CliRunner

    from emulator.cli import app
    for cmd in _commands(src):
        if cmd[0] == "file":
            (workdir / cmd[1]).write_text(cmd[2])
            continue
        r = CliRunner().invoke(app, cmd[1])
        assert r.exit_code == 0, f"{where}: flemu {' '.join(cmd[1])}: exit {r.exit_code}\n{r.output[-3000:]}"


def test_bash_blocks_of_flemu_commands_run_in_process():
    src = "cat > a.yaml <<'END'\nname: x\nEND\nflemu run a.yaml --set 'k=[1, 2]' -q   # note\n"
    assert _commands(src) == [("file", "a.yaml", "name: x\n"), ("flemu", ["run", "a.yaml", "--set", "k=[1, 2]", "-q"])]
    assert _commands("flemu run a.yaml | tee log") is None and _commands("ls runs") is None


def run_page(page: str, workdir: Path) -> int:
    """Run the page's blocks in `workdir`; returns how many ran. A failing block fails with
    its page and line."""
    path = ROOT / page
    code = [b for b in blocks(path.read_text()) if b[0] in RUN]
    for name in ("scenarios", "docs"):
        (workdir / name).symlink_to(ROOT / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=str(ROOT))
    namespace: dict = {"__name__": "__docs__"}
    old = Path.cwd()
    os.chdir(workdir)
    try:
        for lang, src, line in code:
            where = f"{page}:{line}"
            if lang == "bash" and in_process(src):
                run_in_process(src, workdir, where)
            elif lang == "bash":
                r = subprocess.run(["bash", "-euo", "pipefail", "-c", src], cwd=workdir, env=env,
                                   capture_output=True, text=True)
                assert r.returncode == 0, f"{where}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            else:
                try:
                    exec(compile(src, where, "exec"), namespace)
                except Exception as e:                       # noqa: BLE001 - reported with the block's place
                    raise AssertionError(f"{where}: {type(e).__name__}: {e}") from e
    finally:
        os.chdir(old)
    return len(code)


def getting_started_made_what_it_says(workdir: Path):
    """Not only exit 0: the files the page tells the reader about exist, with the rounds asked."""
    import pandas as pd
    m = pd.read_csv(workdir / "runs/first/metrics.csv")
    assert m["round"].max() == 3
    assert (workdir / "runs/first/accuracy.png").stat().st_size > 5000
    idx = pd.read_csv(workdir / "runs/deadline/sweep.csv")
    assert sorted(idx["variant"]) == ["deadline", "deadline", "wait_all", "wait_all"]
    assert set(idx["status"]) == {"complete"}
    assert (workdir / "runs/deadline/compare.csv").exists() and (workdir / "runs/deadline/report.html").exists()
    assert pd.read_csv(workdir / "runs/py/metrics.csv")["round"].max() == 2


CHECKS = {"docs/getting-started.md": getting_started_made_what_it_says}   # optional, per page


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.slow
def test_page_code_runs(page, tmp_path, one_torch_thread):      # 218 s -> 41 s here, loaded
    from registry_snapshot import registry_snapshot
    with registry_snapshot():                # what a page registers is forgotten afterwards
        assert run_page(page, tmp_path) > 0, f"{page} has no ```bash or ```python block to run"
    if page in CHECKS:
        CHECKS[page](tmp_path)
