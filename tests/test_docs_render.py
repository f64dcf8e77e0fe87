"""Pages that render (issue 39): the Markdown lint of `make docs` passes on every page and fails
on what Python-Markdown would render as run-on text; the CLI reference is the one the CLI
generates; the maths renderer is bundled (no network at view time)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LINT = ROOT / "docs" / "tools" / "lint_docs.py"


def _lint(*paths) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LINT), *map(str, paths)], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_every_docs_page_passes_the_lint():
    r = _lint()
    assert r.returncode == 0, r.stdout + r.stderr


GOOD = "# Title\n\nSome text:\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nAfter.\n"
BROKEN = {
    # a list right after a paragraph: Python-Markdown renders it as one run-on paragraph
    "list after paragraph": ("# Title\n\nClaims, one by one:\n- one\n- two\n", "MD032"),
    # a list right after a table: its items are read as table rows or text
    "list after table": ("# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n- one\n- two\n", "MD058"),
    # a table inside a list item indented by 2: Python-Markdown ends the list there
    "table in a list item at 2 spaces": ("# Title\n\n- item:\n\n  | a | b |\n  |---|---|\n  | 1 | 2 |\n\n"
                                         "  After the table.\n- next\n", "FLM001"),
    # an item right after an indented paragraph of the item before: glued to that paragraph
    "item after an item's second paragraph": ("# Title\n\n- item\n\n    Its second paragraph.\n- next\n", "FLM001"),
    # a nested list at 2 spaces: Python-Markdown makes it a sibling, not a child
    "nested list at 2 spaces": ("# Title\n\n- outer\n  - inner\n- next\n", "FLM001"),
}


def test_the_lint_passes_a_clean_page(tmp_path):
    page = tmp_path / "good.md"
    page.write_text(GOOD)
    r = _lint(page)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_lint_fails_on_a_planted_broken_list(tmp_path, case):
    text, rule = BROKEN[case]
    page = tmp_path / "broken.md"
    page.write_text(text)
    r = _lint(page)
    assert r.returncode == 1, r.stdout
    assert rule in r.stdout and "broken.md:" in r.stdout, r.stdout


def test_cli_reference_page_is_generated_from_the_cli():
    """docs/cli.md is typer's rendering of the live command tree: regenerate it with
    `python docs/tools/cli_reference.py --write` (or `make docs`) when this fails."""
    r = subprocess.run([sys.executable, str(ROOT / "docs/tools/cli_reference.py")], capture_output=True, text=True,
                       cwd=ROOT, check=True)
    page = (ROOT / "docs" / "cli.md").read_text()
    assert page == r.stdout
    # every command of the CLI, each with its options, is on the page
    from emulator.cli import app
    import typer
    command = typer.main.get_command(app)
    for name, sub in command.commands.items():
        assert f"### `flemu {name}`" in page, name
        for p in sub.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("--"):
                    assert f"`{opt}" in page or f", {opt}" in page, (name, opt)


def test_maths_and_styles_are_served_from_the_site_itself():
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    assert any(isinstance(e, dict) and e.get("pymdownx.arithmatex", {}).get("generic") for e in cfg["markdown_extensions"])
    assets = cfg["extra_javascript"] + cfg["extra_css"]
    assert any("katex.min.js" in a for a in assets)
    for a in assets:
        assert not re.match(r"^(https?:)?//", a), a
        assert (ROOT / "docs" / a).is_file(), a
    css = (ROOT / "docs/assets/katex/katex.min.css").read_text()
    for font in set(re.findall(r"fonts/(KaTeX_[\w-]+\.woff2)", css)):
        assert (ROOT / "docs/assets/katex/fonts" / font).is_file(), font


def _api_names() -> list:
    import emulator.api
    return list(emulator.api.__all__)


def test_every_exported_name_is_in_the_export_table_and_on_one_api_page():
    text = (ROOT / "docs" / "write-your-own.md").read_text()
    table = text[text.index("## 9. What `emulator.api` exports"):text.index("The package ships")]
    in_table = set(re.findall(r"`(\w+)`", table))
    pages = {p.name: p.read_text() for p in (ROOT / "docs" / "api").glob("*.md")}
    for name in _api_names():
        assert name in in_table, f"{name} is exported by emulator.api but missing from write-your-own's table"
        on = [p for p, body in pages.items() if re.search(rf"^::: emulator\.api\.{name}$", body, re.M)]
        assert len(on) == 1, (name, on)


CHROMIUM = __import__("shutil").which("chromium")
PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; font: 16px sans-serif; }}
.md-typeset pre > code {{ display: block; overflow: auto; white-space: pre; }}
</style>{css}</head><body><article class="md-content__inner md-typeset" style="width: 600px">
<p>Text that wraps as text does, and a code block below.</p>
<pre><code>{code}</code></pre>{extra}
</article></body></html>"""


def _site(tmp_path, pages: dict) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    for name, html in pages.items():
        (site / name).write_text(html)
    return site


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
@pytest.mark.slow
def test_docs_check_fails_on_a_page_that_overflows_its_text_column(tmp_path):
    """docs/tools/browser_check.py (make docs-check) in a real Chromium: a code line hidden behind
    a scroll bar and an image wider than the column fail the page; the same code line with the
    site's stylesheet (docs/assets/css/extra.css: code wraps) passes."""
    sys.path.insert(0, str(ROOT / "docs" / "tools"))
    import browser_check
    css = "<style>" + (ROOT / "docs/assets/css/extra.css").read_text() + "</style>"
    long_line = "flemu run scenarios/quickstart.yaml " + " ".join(f"--set run.x{i}=1" for i in range(20))
    site = _site(tmp_path, {
        "index.html": PAGE.format(css=css, code="short line", extra=""),
        "code_scrolls.html": PAGE.format(css="", code=long_line, extra=""),
        "code_wraps.html": PAGE.format(css=css, code=long_line, extra=""),
        "wide_block.html": PAGE.format(css=css, code="x", extra='<div style="width: 900px; height: 10px"></div>'),
    })
    out = tmp_path / "shots"
    args = ["--site", str(site), "--out", str(out), "--no-report", "--chromium", CHROMIUM, "--pages"]
    assert browser_check.main(args + ["index.html", "code_wraps.html"]) == 0
    assert browser_check.main(args + ["code_scrolls.html"]) == 1
    assert browser_check.main(args + ["wide_block.html"]) == 1
    assert (out / "code_wraps.png").stat().st_size > 0
