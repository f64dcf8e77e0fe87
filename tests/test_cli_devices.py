"""The command line around devices: `flemu list devices` names every registered device
model, and `flemu plot participation RUN_DIR` draws the participation raster of a run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import tiny

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _flemu_exe() -> str:
    exe = Path(sys.executable).with_name("flemu")
    return str(exe) if exe.exists() else str(ROOT / ".venv" / "bin" / "flemu")


def test_list_devices_names_every_device_model():
    env = dict(os.environ, COLUMNS="200")
    r = subprocess.run([_flemu_exe(), "list", "devices"], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for header in ("compute models", "availability models", "network link models",
                   "server-side selection"):
        assert header in out
    words = set(out.replace("│", " ").replace("┃", " ").split())
    for name in ("constant", "lognormal", "iterations", "flops",                 # compute
                 "always", "bernoulli", "markov", "markov_time", "diurnal",      # availability
                 "cyclic", "reshuffled_cyclic", "uniform", "biased",             # selection
                 "link", "link_trace", "instant"):                                # network
        assert name in words, name
    # parameters of the link model are listed too
    for p in ("latency", "up_mbps", "down_mbps", "jitter=0.0", "spread=0.0"):
        assert p in out, p


@pytest.fixture
def tiny_run(run_in):
    sc = tiny()
    sc["clients"]["groups"][0]["availability"] = {"model": "bernoulli", "p": 0.7}
    return run_in(sc).run_dir


def test_plot_participation_writes_a_png(tiny_run, tmp_path):
    from emulator.cli import app
    r = CliRunner().invoke(app, ["plot", "participation", str(tiny_run)])
    assert r.exit_code == 0, r.output
    png = tiny_run / "participation.png"
    assert png.exists() and png.stat().st_size > 1000
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "participation.png" in r.output

    target = tmp_path / "raster.png"
    r = CliRunner().invoke(app, ["plot", "participation", str(tiny_run), "--out", str(target)])
    assert r.exit_code == 0, r.output
    assert target.stat().st_size > 1000 and target.read_bytes()[:8] == PNG_MAGIC


def test_plot_participation_rejects_a_non_run_directory(tmp_path):
    from emulator.cli import app
    r = CliRunner().invoke(app, ["plot", "participation", str(tmp_path)])
    assert r.exit_code == 2
    assert "not a run directory" in r.output
    assert not (tmp_path / "participation.png").exists()
