"""QSGD's Elias-coded size (docs/algorithms/compression.md 2.2, 3): the bit count of a
hand-built message is the hand-computed one, and a run reports it per upload and per round
in `bytes_up_entropy` while its clock keeps the fixed-width size."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

import emulator.api as api
from emulator import registry
from emulator.codecs.elias import omega_bits, qsgd_bits
from emulator.scenario.schema import member
from conftest import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_elias_omega_lengths_are_the_codes_lengths():
    # 1 = "0"; 2 = "10 0"; 3 = "11 0"; 4 = "10 100 0"; 7 = "10 111 0"; 8 = "11 1000 0";
    # 16 = "10 100 10000 0"; 100 = "10 110 1100100 0"
    x = np.array([1, 2, 3, 4, 7, 8, 15, 16, 100])
    assert omega_bits(x).tolist() == [1, 3, 3, 6, 6, 7, 7, 11, 13]


def test_the_elias_size_of_a_hand_built_vector_is_the_hand_count():
    c = registry.get("codec", "qsgd").factory(member("codec", "qsgd", s=5, bucket=4))
    # buckets [0, 3, 0, -4] (norm 5: levels 0 3 0 4), [0, 0, 0, 0] (norm 0), [6] (norm 6: level 5);
    # every level is an integer, so no draw changes it
    v = torch.tensor([0.0, 3.0, 0.0, -4.0, 0.0, 0.0, 0.0, 0.0, 6.0], dtype=torch.float64)
    b1 = 32 + (3 + 3) + 1 + 2 + (3 + 6)   # norm; gaps 2, 2; end gap 4 + 1 - 4 = 1; 2 signs; levels 3, 4: 50
    b2 = 32 + 6                           # norm; end gap 4 + 1 = 5: "10 101 0"
    b3 = 32 + 1 + 1 + 1 + 6               # norm; gap 1; end gap 1 + 1 - 1 = 1; a sign; level 5: 41
    levels = np.array([[0, 3, 0, 4], [0, 0, 0, 0], [5, 0, 0, 0]])
    assert qsgd_bits(levels, np.array([4, 4, 1])) == b1 + b2 + b3 == 129
    decoded, nbytes = c.encode_coded(v, np.random.default_rng(0))
    assert nbytes == -(-(b1 + b2 + b3) // 8) == 17
    assert torch.equal(decoded, v)                                    # integer levels: exact
    assert torch.equal(c.encode(v, np.random.default_rng(0)), decoded)
    assert c.wire_bytes(9, 4) == -(-(3 * 32 + 9 * (1 + 3)) // 8)      # the fixed width: 17 bytes too


def test_a_run_reports_the_coded_size_and_times_the_fixed_one(tmp_path):
    sc = tiny(**{"network.codec": {"up": {"name": "qsgd", "s": 1, "bucket": 64}}, "network.overhead_bytes": 40,
                 "run.rounds": 3})
    api.run(sc, out=tmp_path / "q")
    m = pd.read_csv(tmp_path / "q" / "metrics.csv").query("round > 0")
    c = pd.read_csv(tmp_path / "q" / "clients.csv")
    fixed = -(-(32 * 11 + 650 * 2) // 8) + 40                         # 650 parameters, 11 buckets: 207 + 40
    sel = c[c.selected]
    assert set(sel.bytes_up) == {fixed}
    assert sel.comm_time.to_numpy() == pytest.approx(2 * 0.01 + (4 * 650 + 40 + fixed) * 8 / 1e7, abs=1e-12)
    coded = sel.bytes_up_entropy.to_numpy()
    assert (coded > 40 + 11 * 4).all() and (coded < fixed).all() and len(set(coded)) > 1   # data-dependent
    assert c[~c.selected].bytes_up_entropy.isna().all()
    per_round = sel.groupby("round").bytes_up_entropy.sum()
    assert m.set_index("round").bytes_up_entropy.to_dict() == per_round.to_dict()
    assert (m.bytes_up == 3 * fixed).all()


def test_an_aggregation_that_encoded_nothing_reports_no_coded_size():
    # like codec_error: empty (NaN) when the aggregation encoded no upload, not 0 bytes
    from emulator.codecs.encoding import UploadEncoding
    from emulator.rng import Streams

    class Algo:
        up_reference = "zero"

    codec = registry.get("codec", "qsgd").factory(member("codec", "qsgd", s=1, bucket=64))
    enc = UploadEncoding(codec, Algo, Streams(0), 0, overhead=40)
    rows, clients = enc.take_columns()
    assert math.isnan(rows["bytes_up_entropy"]) and math.isnan(rows["codec_error"]) and clients["bytes_up_entropy"] == {}
    enc.encode(2, 1, [torch.zeros(9, dtype=torch.float64)], None)   # one upload, a zero bucket of 9
    rows, clients = enc.take_columns()
    # the norm's 32 bits and the end gap 9 + 1 = 10, "11 1010 0": 39 bits, 5 bytes, and the overhead
    assert rows["bytes_up_entropy"] == clients["bytes_up_entropy"][2] == 5 + 40
