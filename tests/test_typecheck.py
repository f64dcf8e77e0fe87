"""The public surface type-checks: mypy over emulator/api.py and every example plugin
(configuration in pyproject.toml, [tool.mypy]; heavy libraries are not followed, so the
check takes seconds). A plugin that calls the API wrongly is caught."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def mypy(*paths):
    pytest.importorskip("mypy")
    return subprocess.run([sys.executable, "-m", "mypy", *map(str, paths)], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.slow
def test_api_and_examples_type_check():
    assert (ROOT / "emulator" / "py.typed").exists()
    r = mypy("emulator/api.py", "examples/")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found" in r.stdout


def test_a_wrong_call_of_the_api_is_caught(tmp_path):
    bad = tmp_path / "bad_plugin.py"
    bad.write_text("from emulator.api import register_step_time\n"
                   "register_step_time(3, lambda client, round_, rng: 0.1)\n")
    r = mypy(bad)
    assert r.returncode == 1 and 'Argument 1 to "register_step_time" has incompatible type "int"' in r.stdout
