"""docs/local-training.md: its Python blocks, run in order in one fresh interpreter (as a
reader would paste them), from a temporary directory; every block's assertions hold."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "local-training.md"


def blocks() -> list:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_guide_has_a_block_per_depth():
    text = "\n".join(blocks())
    for name in ("LossTerm", "GradTransform", "ClipPerSample", "OptimizerRule", "TrainFunction"):
        assert name in text


@pytest.mark.slow
def test_the_guides_code_runs(tmp_path):
    script = "\n\n".join(blocks()) + "\nprint('DOCS OK')\n"
    (tmp_path / "guide.py").write_text(script)
    out = subprocess.run([sys.executable, "guide.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "DOCS OK" in out.stdout
    assert (tmp_path / "runs" / "mine" / "summary.json").exists()
    assert (tmp_path / "runs" / "extragradient" / "summary.json").exists()
