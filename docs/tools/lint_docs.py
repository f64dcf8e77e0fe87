"""The Markdown lint of `make docs`: pymarkdown (pymarkdownlnt) over every docs page and README.md.

    python docs/tools/lint_docs.py [FILE_OR_DIR ...]     # default: docs/ and README.md

The rule set is pymarkdown's, configured in `[tool.pymarkdown]` of pyproject.toml (blank lines
around lists, tables, fenced blocks and headings; nested lists 4 spaces deep), plus one rule of
ours for Python-Markdown's 4-space list content (docs/tools/md_python_lists.py). Exit 0 when
clean, 1 with one line per problem (file:line:column: rule: message) otherwise. The rules are
explained for writers in CONTRIBUTING.md ("Writing docs").
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).with_name("md_python_lists.py")
DEFAULT = ["docs", "README.md", "CONTRIBUTING.md"]


def lint(paths: list[str]) -> subprocess.CompletedProcess:
    """Run pymarkdown on `paths` (relative to the repository root) with the project's rules."""
    cmd = [sys.executable, "-m", "pymarkdown", "--config", str(ROOT / "pyproject.toml"),
           "--add-plugin", str(PLUGIN), "scan", "--recurse", *paths]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def main(argv=None) -> int:
    paths = list(argv if argv is not None else sys.argv[1:]) or [p for p in DEFAULT if (ROOT / p).exists()]
    r = lint(paths)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    if r.returncode:
        print("Markdown lint failed: see CONTRIBUTING.md, 'Writing docs', for the rules", file=sys.stderr)
    return 1 if r.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
