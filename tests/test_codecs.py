"""Codecs change the values the server sees and the clock (docs/algorithms/compression.md):
QSGD is unbiased within its paper's variance, top-k keeps exactly the k largest and its error
feedback carries the rest, every codec's bytes are its formula, a slow link's upload time
shrinks by the byte ratio, encoded runs are the same bits on both engines, a cast changes
training, a late upload is never encoded, and a bad codec block is one error at its YAML path."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

import emulator.api as api
from emulator import registry
from emulator.algorithms.state import ClientStates
from emulator.cli import app
from emulator.codecs.encoding import RESIDUAL, UploadEncoding
from emulator.rng import Streams
from emulator.scenario.schema import member
from conftest import tiny, two_links

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def codec(name: str, **kw):
    return registry.get("codec", name).factory(member("codec", name, **kw))


def run_dir(sc, tmp_path, name):
    out = tmp_path / name
    api.run(sc, out=out)
    return out


# ----------------------------------------------------------------------------- the encodings
def test_qsgd_is_unbiased_within_the_papers_variance():
    # Alistarh et al. 2017, Lemma 3.1: E[Q(v)] = v and E||Q(v) - v||^2 <= min(b/s^2, sqrt(b)/s) ||v||^2 per bucket
    v = torch.from_numpy(np.random.default_rng(0).normal(size=96)).to(torch.float64)
    c, M = codec("qsgd", s=2, bucket=32), 4000
    draws = torch.stack([c.encode(v, np.random.default_rng([7, i])) for i in range(M)])
    bound = sum(min(32 / 4, math.sqrt(32) / 2) * float(b.norm()) ** 2 for b in v.split(32))
    err2 = float(((draws - v) ** 2).sum(1).mean())
    assert err2 <= bound                                       # the lemma's variance
    # the mean of M independent encodings: E||mean - v||^2 = Var/M <= bound/M (x 3: a fixed seed's margin)
    assert float(((draws.mean(0) - v) ** 2).sum()) <= 3 * err2 / M
    levels = (draws / torch.stack([b.norm().float().double().expand(32) for b in v.split(32)]).reshape(-1) * 2)
    assert torch.allclose(levels, levels.round(), rtol=0, atol=1e-9)   # s levels of the fp32 norm


def test_topk_keeps_exactly_the_k_largest_and_feedback_carries_the_rest():
    class Algo:                      # what UploadEncoding reads of an algorithm: its state store and reference
        up_reference = "zero"
        states = ClientStates(4, 50, torch.device("cpu"), torch.float32)

    c = codec("topk", k=5)
    assert c.stateful
    enc = UploadEncoding(c, Algo, Streams(0), 0)
    g = torch.Generator().manual_seed(1)
    old = torch.zeros(50)
    for t in (1, 2, 3):
        u = torch.randn(50, generator=g)
        (seen,) = enc.encode(2, t, [u], None)
        p = u + old
        top = set(torch.argsort(p.abs(), descending=True)[:5].tolist())
        assert set(torch.nonzero(seen).flatten().tolist()) == top           # exactly the k largest of u + e
        assert torch.equal(seen[list(top)], p[list(top)])
        new = Algo.states.row(f"{RESIDUAL}.0", 2)
        assert torch.equal(new + seen, u + old)                             # e' + c == u + e, bit for bit
        old = new.clone()
    assert float(Algo.states.row(f"{RESIDUAL}.0", 1).abs().sum()) == 0      # another client's residual untouched


def test_a_clients_draws_are_its_own_whatever_else_was_encoded():
    # keyed by (codec, model, client, round): the order of the other uploads changes nothing
    class Algo:
        up_reference = "zero"
        states = ClientStates(4, 40, torch.device("cpu"), torch.float32)

    u = {c: torch.randn(40, generator=torch.Generator().manual_seed(c)) for c in range(4)}
    seen = []
    for order in ([0, 1, 2, 3], [3, 1, 0]):
        enc = UploadEncoding(codec("qsgd", s=2, bucket=8), Algo, Streams(5), 0)
        seen.append({c: enc.encode(c, 4, [u[c]], None)[0] for c in order})
    assert all(torch.equal(seen[0][c], seen[1][c]) for c in (0, 1, 3))
    enc = UploadEncoding(codec("qsgd", s=2, bucket=8), Algo, Streams(5), 0)
    assert not torch.equal(enc.encode(1, 5, [u[1]], None)[0], seen[0][1])    # another round, other draws


def test_randk_without_feedback_is_unbiased_and_signsgd_is_the_scaled_sign():
    v = torch.tensor([3.0, -1.0, 0.5, 0.0, -2.5, 1.0, 4.0, -0.5])
    rk = codec("randk", k=2, error_feedback=False)
    mean = torch.stack([rk.encode(v, np.random.default_rng([3, i])) for i in range(8000)]).mean(0)
    assert torch.allclose(mean, v, atol=0.3)        # E = v (scaled n/k); the std of the mean <= 0.08
    s = codec("signsgd").encode(v, None)
    assert torch.equal(s, torch.where(v >= 0, 1.5625, -1.5625))             # ||v||_1 / n = 12.5 / 8


# ----------------------------------------------------------------------------- bytes
def test_exact_bytes_per_codec_for_a_hand_sized_message():
    n, B = 1000, 4
    want = {"none": 4000, "ratio": 1200, "fp16": 2000, "bf16": 2000,
            "qsgd": (128 + 1000 * 4) // 8,      # 4 buckets x 32-bit norm + 1000 x (sign + 3-bit level): 516
            "topk": 80,                         # 10 x (fp32 value + 32-bit index)
            "randk": 48,                        # 10 fp32 values + a 64-bit seed
            "signsgd": 125 + 4}                 # 1000 bits + the fp32 scale
    kw = {"ratio": {"ratio": 0.3}, "qsgd": {"s": 7, "bucket": 256}, "topk": {"k": 10}, "randk": {"fraction": 0.01}}
    got = {name: codec(name, **kw.get(name, {})).wire_bytes(n, B) for name in want}
    assert got == want
    assert codec("qsgd", s=15, bucket=512).wire_bytes(1001, 4) == math.ceil((2 * 32 + 1001 * 5) / 8)


def test_a_slow_links_upload_time_shrinks_by_the_byte_ratio(tmp_path):
    plain = pd.read_csv(run_dir(two_links(), tmp_path, "plain") / "clients.csv")
    signed = pd.read_csv(run_dir(two_links(**{"network.codec": {"up": "signsgd"}}), tmp_path, "sign") / "clients.csv")
    n, nb_sign = 650, 86                                        # logreg on digits: 64 x 10 + 10; ceil(650/8) + 4
    assert set(plain.bytes_up[plain.selected]) == {4 * n}
    assert set(signed.bytes_up[signed.selected]) == {nb_sign}
    assert (signed.bytes_down == plain.bytes_down).all()        # the download is not encoded
    for df, nb in ((plain, 4 * n), (signed, nb_sign)):
        rows = df[df.selected]
        up_mbps = np.where(rows.client < 4, 10, 0.5)
        down = 0.01 + 4 * n * 8.0 / (10 * 1e6)
        up = 0.01 + nb * 8.0 / (up_mbps * 1e6)
        assert rows.comm_time.to_numpy() == pytest.approx(down + up, rel=0, abs=1e-12)
    slow_up = lambda df: df[df.selected & (df.client >= 4)].comm_time.to_numpy() - (0.01 + 4 * n * 8.0 / 1e7) - 0.01
    assert slow_up(signed) / slow_up(plain) == pytest.approx(nb_sign / (4 * n), rel=1e-12)   # the byte ratio
    m_plain = pd.read_csv(tmp_path / "plain" / "metrics.csv")
    m_sign = pd.read_csv(tmp_path / "sign" / "metrics.csv")
    m_plain, m_sign = m_plain[m_plain["round"] > 0], m_sign[m_sign["round"] > 0]
    assert (m_sign.round_time < m_plain.round_time).all()      # the slow link no longer decides the round
    assert (m_sign.bytes_up == 8 * nb_sign).all() and "codec_error" not in m_plain


# ----------------------------------------------------------------------------- values
def test_fp16_changes_training_and_ratio_does_not(tmp_path):
    x = np.load(run_dir(tiny(), tmp_path, "plain") / "model.npy")
    x16 = np.load(run_dir(tiny(**{"network.codec": {"up": "fp16"}}), tmp_path, "fp16") / "model.npy")
    xr = np.load(run_dir(tiny(**{"network.codec": {"up": {"name": "ratio", "ratio": 0.5}}}), tmp_path, "r") / "model.npy")
    assert not np.array_equal(x, x16) and np.abs(x - x16).max() < 1e-3      # changed, by fp16 rounding
    assert np.array_equal(x, xr)                                            # bytes only
    m16, mr = (pd.read_csv(tmp_path / d / "metrics.csv").query("round > 0") for d in ("fp16", "r"))
    assert (m16.bytes_up == mr.bytes_up).all()                              # the same bytes: 2 of 4
    assert (m16.codec_error > 0).all() and (m16.codec_error < 2 ** -10).all()


def test_a_cast_download_is_what_the_clients_train_from(tmp_path):
    x = np.load(run_dir(tiny(), tmp_path, "plain") / "model.npy")
    d = run_dir(tiny(**{"network.codec": {"down": "bf16"}}), tmp_path, "bf16")
    assert not np.array_equal(x, np.load(d / "model.npy"))
    c = pd.read_csv(d / "clients.csv").query("selected")
    assert set(c.bytes_down) == {2 * 650} and set(c.bytes_up) == {4 * 650}
    assert "codec_error" not in pd.read_csv(d / "metrics.csv")             # the upload is not encoded


@pytest.mark.parametrize("up,algo", [({"name": "topk", "fraction": 0.05}, "fedavg"), ({"name": "qsgd", "s": 3}, "fedavg"),
                                     ({"name": "randk", "k": 30}, "scaffold")])
def test_encoded_runs_are_the_same_bits_on_both_engines_and_close_across_executors(tmp_path, up, algo):
    # fedavg: cohorts (Rows); scaffold: client by client, two vectors per upload, relative to zero
    runs = {}
    for name, over in (("process", {"protocol.engine": "process"}), ("vector", {"protocol.engine": "vector"}),
                       ("batched", {"protocol.engine": "vector", "executor": {"name": "batched"}})):
        sc = tiny(**{"network.codec": {"up": up}, "run.rounds": 4, "algorithm": {"name": algo, "lr": 0.1}, **over})
        d = run_dir(sc, tmp_path, name)
        runs[name] = (pd.read_csv(d / "metrics.csv").drop(columns=["wall_time"]), np.load(d / "model.npy"))
    assert json.load(open(tmp_path / "vector" / "summary.json"))["engine"] == "vector"
    pd.testing.assert_frame_equal(runs["process"][0], runs["vector"][0])
    assert np.array_equal(runs["process"][1], runs["vector"][1])
    assert np.allclose(runs["batched"][1], runs["vector"][1], atol=1e-5)


def test_a_late_upload_is_never_encoded_and_its_residual_is_left_as_it_was(tmp_path):
    # SCAFFOLD, client by client: the slow group trains, forms its upload (2 x 20 entries: 320 bytes)
    # and sends it over 0.001 Mbit/s (2.56 s), missing every 1 s deadline; its residuals are never written
    sc = two_links(**{"network.codec": {"up": {"name": "topk", "k": 20}}, "run.rounds": 3,
                      "algorithm": {"name": "scaffold", "lr": 0.1}, "protocol.engine": "process",
                      "protocol.wait": {"mode": "deadline", "seconds": 1.0}})
    sc["clients"]["groups"][1]["network"]["up_mbps"] = 0.001
    d = run_dir(sc, tmp_path, "late")
    c = pd.read_csv(d / "clients.csv")
    slow, fast = c[c.client >= 4], c[c.client < 4]
    assert (slow.steps == 5).all() and (slow.weight == 0).all() and (fast.weight > 0).all()
    rows = json.load(open(d / "summary.json"))["client_state_rows"]
    assert rows[f"{RESIDUAL}.0"] == rows[f"{RESIDUAL}.1"] == 4


# ----------------------------------------------------------------------------- boundaries
BAD = [({"up": "zip"}, "network.codec.up.name", "unknown message codec 'zip'"),
       ({"up": {"name": "qsgd", "s": 0}}, "network.codec.up.s", "greater than or equal to 1"),
       ({"down": {"name": "topk", "k": 3}}, "network.codec.down", "on the download use one of: bf16, fp16, none, ratio"),
       ({"up": {"name": "randk"}}, "network.codec.up", "give exactly one of `k` or `fraction`")]


@pytest.mark.parametrize("block,path,words", BAD, ids=[b[1] + ":" + b[2][:12] for b in BAD])
def test_a_bad_codec_block_is_one_error_at_its_yaml_path(tmp_path, block, path, words):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(tiny(**{"network.codec": block})))
    out = tmp_path / "runs" / "bad"
    res = CliRunner().invoke(app, ["run", str(f), "--out", str(out), "-q"])
    assert res.exit_code == 2 and f"{path}:" in res.output and words in res.output, res.output
    assert not (tmp_path / "runs").exists()


def test_the_old_compression_key_means_what_it_meant_and_clashes_with_a_codec():
    with pytest.raises(api.ScenarioError, match=r"network.compression.up: is 0.5 and network.codec.up is 'fp16'"):
        api.load(tiny(**{"network.codec": {"up": "fp16"}, "network.compression": {"up": 0.5}}))
    with pytest.raises(api.ScenarioError, match=r"network.codec.up: algorithm 'fedumf' does not declare"):
        api.load(tiny(**{"network.codec": {"up": "qsgd"}, "algorithm": {"name": "fedumf", "lr": 0.1}}))


def test_a_plugin_codec_is_checked_where_its_values_cross(tmp_path):
    class Doubles(api.Codec):
        """sends twice the update (a broken codec) in 3 bytes a value"""

        def wire_bytes(self, numel, bytes_per_param):
            return 3 * numel

        def encode(self, v, rng):
            return torch.full_like(v, math.inf) if self.p.broken else 2 * v

    class DoublesParams(api.Params):
        broken: bool = False

    api.register("codec", "doubles", DoublesParams, "twice", Doubles)
    try:
        d = run_dir(tiny(**{"network.codec": {"up": "doubles"}, "run.rounds": 1}), tmp_path, "ok")
        assert set(pd.read_csv(d / "metrics.csv").query("round > 0").bytes_up) == {3 * 3 * 650}
        api.run(tiny(**{"network.codec": {"up": {"name": "doubles", "broken": True}}}), out=tmp_path / "bad")
        summary = json.load(open(tmp_path / "bad" / "summary.json"))
        assert summary["status"] == "failed", summary
        assert re.search(r"codec 'doubles' \(class .*Doubles.*\)\.encode for client \d+ in round 1.*non-finite",
                         summary["error"]["message"]), summary["error"]
    finally:
        registry._TABLES["codec"].pop("doubles")


def test_codec_is_exported_and_listed_in_the_guides_export_table():
    assert "Codec" in api.__all__ and api.Codec.__abstractmethods__ == {"encode", "wire_bytes"}
    text = (ROOT / "docs" / "write-your-own.md").read_text().split("## 9. What `emulator.api` exports")[1]
    names = set(re.findall(r"`(\w+)`", text.split("The package ships")[0]))
    assert "Codec" in names and names <= set(api.__all__), names - set(api.__all__)


def test_every_encoded_message_gets_its_own_draws_also_two_merges_from_one_version(tmp_path):
    """A drawing codec's stream is keyed by the aggregation that reads the upload: under async
    with a buffer of 2, a fast client merges twice from one downloaded version, and its two
    messages must not share draws; a drawing download codec gets the broadcast's own stream
    (compression.md 1.3, 1.4)."""
    seen = []

    class Marks(api.Codec):
        """records its first draw; values and bytes as fp32"""
        relative = False

        def wire_bytes(self, numel, bytes_per_param):
            return 4 * numel

        def encode(self, v, rng):
            seen.append(float(rng.random()))
            return v

    api.register("codec", "marks", api.Params, "records a draw per message", Marks)
    try:
        link = {"latency": 0.01, "up_mbps": 10, "down_mbps": 10}
        groups = [{"name": "fast", "fraction": 0.5, "compute": {"model": "constant", "step_time": 0.01}, "network": link},
                  {"name": "slow", "fraction": 0.5, "compute": {"model": "constant", "step_time": 1.0}, "network": link}]
        sc = tiny(**{"clients": {"count": 2, "groups": groups}, "run.rounds": 6,
                     "protocol": {"name": "async", "local_steps": 2},
                     "algorithm": {"name": "fedasync", "lr": 0.1, "buffer": 2},
                     "network.codec": {"up": "marks"}})
        d = run_dir(sc, tmp_path, "up")
        assert json.load(open(d / "summary.json"))["status"] == "complete"
        assert len(seen) >= 6 and len(set(seen)) == len(seen), seen        # no two messages share draws
        seen.clear()
        run_dir(tiny(**{"network.codec": {"down": "marks"}, "run.rounds": 3}), tmp_path, "down")
        assert len(seen) == 3 and len(set(seen)) == 3                       # one draw per broadcast
    finally:
        registry._TABLES["codec"].pop("marks")
