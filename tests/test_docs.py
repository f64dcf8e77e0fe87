"""Docs that cannot rot (issue 30): the site builds in strict mode (a broken link, a missing
#anchor or a missing page fails), the generated Scenario reference page is the one the code
generates, and no file of the repository cites a path outside it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_scenario_reference_page_is_current():
    """docs/reference.md is generated from the schema and the registry: regenerate it with
    `python -m emulator.docs --write` (or `make docs`) when this fails."""
    from emulator.docs import PAGE
    # in a fresh interpreter: other tests of this worker may have registered components of their own
    r = subprocess.run([sys.executable, "-c", "import sys; from emulator.docs import page; sys.stdout.write(page())"],
                       capture_output=True, text=True, cwd=ROOT, check=True)
    assert (ROOT / PAGE).read_text() == r.stdout


def test_reference_page_lists_every_registered_component():
    from emulator import registry
    from emulator.docs import SECTIONS, page
    text = page()
    for _, kind, _ in SECTIONS:
        for name in registry.table(kind):
            assert f"| `{name}` |" in text, (kind, name)


def _build(tmp_path, docs_dir=None):
    cfg = ROOT / "mkdocs.yml"
    if docs_dir is not None:                   # the same config over another docs folder
        cfg = tmp_path / "mkdocs.yml"
        cfg.write_text((ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs_dir}"))
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(cfg),
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_site_builds_in_strict_mode(tmp_path):
    r = _build(tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    site = tmp_path / "site"
    for page in ("index.html", "getting-started.html", "reference.html", "api.html", "algorithms/tsfl.html",
                 "architecture.html", "changelog.html"):
        assert (site / page).exists(), page                 # .html links: the site reads from disk
    assert 'href="getting-started.html"' in (site / "index.html").read_text()
    # mkdocstrings rendered the API reference, one page per kind (issue 39), with typed signatures
    assert 'id="emulator.api.run"' in (site / "api" / "running.html").read_text()
    algorithms = (site / "api" / "algorithms.html").read_text()
    assert 'id="emulator.api.Arrival.vectors"' in algorithms and 'id="emulator.api.Algorithm"' in algorithms
    assert "doc-signature" in algorithms
    assert 'id="emulator.api.LocalRule"' in (site / "api" / "local-training.html").read_text()
    assert "flemu run" in (site / "cli.html").read_text()


@pytest.mark.slow
def test_strict_build_fails_on_a_broken_anchor(tmp_path):
    """The guard itself: a link to a heading that does not exist stops the build."""
    import shutil
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, symlinks=True)
    p = docs / "concepts.md"
    p.write_text(p.read_text() + "\nSee [nowhere](getting-started.md#no-such-heading).\n")
    r = _build(tmp_path, docs_dir=docs)
    assert r.returncode != 0 and "no-such-heading" in r.stderr


_BESIDE = "sha" + "red"      # the folder beside the repository (spelled in two parts so this file names no path outside)
OUTSIDE = rf"\.\./{_BESIDE}|{_BESIDE}/specs|specs/[a-z]+\.md|DESIGN\.md"
EXEMPT = ("docs/tools/recite.py", "tests/test_docs.py")     # the rewriting script and this test name them


def test_no_file_cites_a_path_outside_the_repository():
    """Specs and the design notes live outside the repository; the code, docs and tests cite
    the project's own pages instead (docs/algorithms/, docs/architecture.md)."""
    r = subprocess.run(["git", "grep", "-n", "-I", "-E", OUTSIDE, "--", ".", *(f":!{e}" for e in EXEMPT)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    assert r.stdout == "", "citations outside the repository (run docs/tools/recite.py):\n" + r.stdout[:3000]


def test_every_cited_docs_page_exists():
    """What the code cites instead must exist: every `docs/<page>.md` named in a source,
    scenario or test file is a file of the repository."""
    r = subprocess.run(["git", "grep", "-h", "-o", "-I", "-E", r"docs/[A-Za-z0-9_/-]+\.md", "--",
                        "emulator", "devices", "analysis", "scenarios", "tests", "benchmarks"],
                       cwd=ROOT, capture_output=True, text=True)
    cited = set(r.stdout.split())
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert not missing, missing
    assert re.search(r"docs/algorithms/\w+\.md", r.stdout) or not cited
