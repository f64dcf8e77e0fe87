"""Rewrite citations of paths outside the repository into the project's own docs pages.

The algorithm specifications and the design notes the project was built from live outside
this repository; the code, tests, scenarios and docs cite the project's own pages instead:

    <outside>/specs/tsfl.md 3.4   ->  docs/algorithms/tsfl.md 3.4   (same section numbers;
                                      <outside>: the folder beside the repository, with
                                      or without a leading ../)
    specs/workloads.md            ->  docs/algorithms/workloads.md
    DESIGN.md section 3           ->  docs/architecture.md section 3 (same section numbers)

and, in code, tests, scenarios and benchmarks (not in docs pages or mkdocs.yml, where `tsfl.md`
is the results page), a bare `tsfl.md 5.1a` / `fedsum.md section 4` becomes `docs/algorithms/tsfl.md 5.1a`, so
that no citation is ambiguous. Idempotent: run it again after merging branches that add
citations (`python docs/tools/recite.py`; `--check` only lists what it would change and exits 1
if anything). tests/test_docs.py asserts that `git grep` finds no citation outside.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = "tsfl|fedsum|fedumf|multimodel|workloads"
SELF = {"docs/tools/recite.py", "tests/test_docs.py"}
CODE = ("emulator/", "devices/", "analysis/", "tests/", "scenarios/", "benchmarks/")

# (pattern, replacement) applied to every tracked text file
EVERYWHERE = [
    # a citation broken over two comment lines: `<outside>/specs/` + newline + `# tsfl.md`
    (re.compile(rf"(?:\.\./)*(?:shared/)?specs/(\n[ \t]*#[ \t]*)(?:docs/algorithms/)?({FAMILIES})\.md"),
     r"\1docs/algorithms/\2.md"),
    (re.compile(rf"(?:\.\./)*(?:shared/)?specs/({FAMILIES})\.md"), r"docs/algorithms/\1.md"),
    (re.compile(r"(?:\.\./)*(?:shared/)?DESIGN\.md"), "docs/architecture.md"),
    (re.compile(r"\bDESIGN §"), "docs/architecture.md section "),
]
# bare family file names, in code, tests, scenarios and benchmarks only (in docs pages and
# mkdocs.yml, `tsfl.md` is the results page), outside the docs pages: not after a path, a word or a link target
BARE = (re.compile(rf"(?<![\w/.\-\]])(?<!\]\()({FAMILIES})\.md\b"), r"docs/algorithms/\1.md")


# in a top-level docs page, a cited note in a code span becomes a link the strict build checks
DOCS_LINK = (re.compile(rf"`docs/algorithms/({FAMILIES})\.md`"), r"[algorithms/\1.md](algorithms/\1.md)")


def tracked() -> list:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split() if p not in SELF]


def rewrite(path: str, text: str) -> str:
    for pat, rep in EVERYWHERE:
        text = pat.sub(rep, text)
    if path.startswith("docs/") and path.count("/") == 1 and path.endswith(".md"):
        pat, rep = DOCS_LINK
        text = pat.sub(rep, text)
    if path.startswith(CODE):
        pat, rep = BARE
        text = pat.sub(rep, text)
    return text


def main(argv=None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    changed = []
    for rel in tracked():
        p = ROOT / rel
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        new = rewrite(rel, text)
        if new != text:
            changed.append(rel)
            if not check:
                p.write_text(new, encoding="utf-8")
    for rel in changed:
        print(("would rewrite " if check else "rewrote ") + rel)
    return 1 if (check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
