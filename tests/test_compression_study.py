"""The compression and privacy study (docs/studies/compression.md): its two sweeps validate and
expand to the runs the page reports (every codec with and without the deadline, every noise
multiplier, 3 seeds each), its fleet is link-bound as the page says (the upload sizes and times
the page quotes follow from the codecs' wire sizes and the slow uplink), the page's tables are
the committed results files, and the page's pipeline counts the bytes to target from
metrics.csv.

The study itself is not run here (about 15-20 min): `make study-compression`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import docs_script
from emulator import registry
from emulator import sweep as sw
from emulator.scenario import schema as scenario
from emulator.scenario.schema import member

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "scenarios" / "studies" / "compression.yaml"
DP_STUDY = ROOT / "scenarios" / "studies" / "compression_dp.yaml"
BASE = ROOT / "scenarios" / "studies" / "compression_base.yaml"


def results_module():
    return docs_script("compression_results")


CODECS = {"none": None, "fp16": {"name": "fp16"}, "qsgd4": {"name": "qsgd", "s": 15, "bucket": 512},
          "top1_ef": {"name": "topk", "fraction": 0.01, "error_feedback": True},
          "powersgd2": {"name": "powersgd", "rank": 2}}


def test_the_codec_sweep_runs_every_codec_with_and_without_the_deadline_on_three_seeds():
    spec = sw.load_spec(str(STUDY))
    plans = sw.expand(spec)
    assert len(plans) == 5 * 2 * 3 and {p.seed for p in plans} == {0, 1, 2}
    assert sorted({p.values["variant"] for p in plans}) == sorted(c + s for c in CODECS for s in ("", "_deadline"))
    sw.resolve(spec, plans)                                  # every run's scenario validates
    mod = results_module()
    for p in plans:
        codec, deadline = mod.split(p.values["variant"])
        up = ((p.scenario.get("network") or {}).get("codec") or {}).get("up")
        want = CODECS[codec]
        if want is None:
            assert up is None
        else:
            assert {k: up[k] for k in want} == want
        wait = p.scenario["protocol"]["wait"]
        assert (isinstance(wait, dict) and wait["mode"] == "deadline" and wait["seconds"] == 2.0) == deadline
    assert mod.deadline_of() == 2.0 and mod.target_of() == 0.85


def test_the_dp_sweep_runs_three_noise_multipliers_and_a_noiseless_reference_on_three_seeds():
    spec = sw.load_spec(str(DP_STUDY))
    plans = sw.expand(spec)
    sw.resolve(spec, plans)
    zs = sorted({p.scenario["algorithm"]["noise_multiplier"] for p in plans})
    assert len(zs) == 4 and zs[0] == 0 and len(plans) == 4 * 3
    for p in plans:
        a = p.scenario["algorithm"]
        assert a["name"] == "dp_fedavg" and a["clients_per_round"] == p.scenario["protocol"]["select"]["k"]
        assert "codec" not in (p.scenario.get("network") or {})


def test_the_fleet_is_link_bound_as_the_page_says():
    """The upload sizes of the page (203,560 / 101,780 / 32,207 / 4,072 bytes for the 50,890
    parameters) are the codecs' wire sizes, and on the slow uplink an uncompressed upload takes
    3.26 s, ten times the slow device's 10 local steps (0.3 s on average)."""
    from emulator.sim.world import World
    sc = scenario.load(str(BASE), ["run.virtual_time=1"])
    w = World(sc)
    n = w.tasks[0].net.dim
    assert n == 784 * 64 + 64 + 64 * 10 + 10 == 50890
    sizes = {k: registry.get("codec", c["name"]).factory(member("codec", c["name"], **{a: b for a, b in c.items() if a != "name"}))
             .wire_bytes(n, 4) for k, c in CODECS.items() if c and c["name"] != "powersgd"}
    assert sizes == {"fp16": 101780, "qsgd4": 32207, "top1_ef": 4072} and 4 * n == 203560
    slow = next(g for g in sc.clients.groups if g.name == "slow")
    assert 4 * n * 8 / (slow.network.up_mbps * 1e6) == pytest.approx(3.25696)
    # a slow client's job: latency and the (uncompressed) download, 10 steps (0.3 s on average), latency and the upload
    job = lambda up: 2 * slow.network.latency + 4 * n * 8 / 5e6 + 0.3 + up * 8 / 0.5e6      # noqa: E731
    assert job(sizes["fp16"]) > 2.0 > job(sizes["qsgd4"])                # the deadline splits fp16 from QSGD
    assert 10 * slow.compute.mean_step_time * 10 < 4 * n * 8 / (slow.network.up_mbps * 1e6)


def test_bytes_to_target_is_the_uploads_summed_until_the_first_evaluation_that_reached_it():
    mod = results_module()
    m = pd.DataFrame({"run": ["b"] * 2 + ["a"] * 4, "round": [2, 1, 1, 2, 3, 4],
                      "bytes_up": [5e5, 5e5, 1e6, 2e6, 3e6, 4e6], "test_acc": [0.9, 0.8, 0.5, np.nan, 0.9, 0.95]})
    c = mod.with_cumulative_bytes(m)
    a, b = c[c["run"] == "a"], c[c["run"] == "b"]
    assert a["mb_up"].tolist() == [1.0, 3.0, 6.0, 10.0] and b["mb_up"].tolist() == [0.5, 1.0]   # per run, by round
    assert mod.bytes_to_target(a, 0.85) == 6.0 and np.isnan(mod.bytes_to_target(a, 0.99))
    assert mod.bytes_to_target(b, 0.85) == 1.0


def test_the_page_shows_the_committed_results_files():
    mod = results_module()
    page = mod.PAGE.read_text()
    r, d = mod.read_results()
    assert mod.render_page(page, r, d) == page
    assert set(r["variant"]) == {c + s for c in CODECS for s in ("", "_deadline")}
    assert (r["runs"] == 3).all() and (r["failed"] == 0).all() and (d["runs"] == 3).all()
