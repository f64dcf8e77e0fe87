"""The docs' code runs (issue 30): every fenced ```bash and ```python block of the pages
listed in PAGES is executed, in page order, in an empty folder that holds a link to the
repository's `scenarios/` (and `docs/`, for pages that read their own examples). Python blocks
share one namespace per page, as a reader pasting them into one session would; bash blocks run
with `bash -euo pipefail` and `flemu` of this environment first on PATH. A renamed option or
a changed API breaks this test, not a reader.

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
PAGES = ["docs/getting-started.md"]
RUN = ("bash", "python")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)


def blocks(text: str) -> list:
    """[(language, code, line)] of the fenced blocks of a Markdown page, in order."""
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def test_blocks_are_found_in_order():
    text = "a\n```bash\necho 1\n```\n\n```text\nnot run\n```\n```python\nx = 1\n```\n"
    assert blocks(text) == [("bash", "echo 1\n", 2), ("text", "not run\n", 6), ("python", "x = 1\n", 9)]


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
            if lang == "bash":
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
def test_page_code_runs(page, tmp_path):
    assert run_page(page, tmp_path) > 0, f"{page} has no ```bash or ```python block to run"
    if page in CHECKS:
        CHECKS[page](tmp_path)
