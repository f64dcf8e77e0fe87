"""docs/write-your-own.md: every ```python block runs, in order, in one namespace, from a
folder holding a copy of examples/ (the guide's paths), and its assertions hold."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from registry_snapshot import registry_snapshot

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "write-your-own.md"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def python_blocks(text: str) -> list:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.slow
def test_guide_python_blocks_run(tmp_path, monkeypatch):
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) >= 8
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "write_your_own"}
    with registry_snapshot():                 # the guide's components are forgotten afterwards
        for i, code in enumerate(blocks):
            try:
                exec(compile(code, f"{DOC.name}[python block {i}]", "exec"), ns)
            except Exception as e:
                raise AssertionError(f"python block {i} of {DOC.name} failed: {type(e).__name__}: {e}\n{code}") from e
    assert (tmp_path / "runs" / "fedadam" / "metrics.csv").exists()
