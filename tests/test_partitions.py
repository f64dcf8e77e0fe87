"""Partitioners: sizes sum to the data set; Dirichlet skew grows as alpha falls; shards give
at most k labels per client; lognormal sizes have the requested spread."""
import numpy as np
import pytest

from emulator.scenario import schema as scenario
from emulator.registry import get

Y = np.repeat(np.arange(10), 400)   # 4,000 samples, 400 per class


def part(name, n_clients=20, seed=0, y=Y, **kw):
    spec = scenario.member("partition", name, **kw)
    return get("partition", name).factory(spec, y, n_clients, np.random.default_rng(seed), "workload.partition")


@pytest.mark.parametrize("name,kw", [("iid", {}), ("dirichlet", {"alpha": 0.3}), ("dirichlet", {"alpha": 100.0}),
                                     ("shards", {"classes_per_client": 2}), ("lognormal", {"sigma": 1.0}),
                                     ("dirichlet", {"alpha": 0.6, "sizes": {"lognormal": 0.3}})])
def test_every_sample_exactly_once(name, kw):
    parts = part(name, **kw)
    assert len(parts) == 20
    allidx = np.concatenate(parts)
    assert len(allidx) == len(Y) and len(np.unique(allidx)) == len(Y)


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(p) for p in part("iid", n_clients=7)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 4000


def _skew(parts):
    """Mean over clients of the share of the client's most common label."""
    return np.mean([np.bincount(Y[p], minlength=10).max() / len(p) for p in parts if len(p)])


def test_dirichlet_skew_grows_as_alpha_falls():
    skews = {a: np.mean([_skew(part("dirichlet", alpha=a, seed=s)) for s in range(5)]) for a in (100.0, 1.0, 0.1)}
    assert skews[100.0] < skews[1.0] < skews[0.1]
    assert skews[100.0] < 0.2          # near-uniform labels: max share close to 1/10
    assert skews[0.1] > 0.6            # strong skew


def test_dirichlet_min_size_and_error():
    parts = part("dirichlet", alpha=0.5, min_size=20)
    assert min(len(p) for p in parts) >= 20
    from emulator.errors import ScenarioError
    with pytest.raises(ScenarioError, match="min_size"):
        part("dirichlet", alpha=0.01, min_size=199)


def test_shards_at_most_k_labels():
    for k in (1, 2, 4, 5):
        for seed in range(3):
            parts = part("shards", classes_per_client=k, seed=seed)
            labels = [len(np.unique(Y[p])) for p in parts]
            # 20k shards of 4000/(20k) samples never straddle a label (the shard size divides 400)
            assert max(labels) <= k
            assert all(len(p) == 4000 // 20 for p in parts)
    # k = 3: shards of 66-67 samples straddle label boundaries, each touching at most 2 labels
    labels = [len(np.unique(Y[p])) for p in part("shards", classes_per_client=3)]
    assert max(labels) <= 6


def test_lognormal_spread():
    y = np.zeros(200_000, dtype=np.int64)
    parts = part("lognormal", n_clients=2000, y=y, sigma=0.8, min_size=1)
    logs = np.log([len(p) for p in parts])
    assert abs(np.std(logs) - 0.8) < 0.05       # within sampling error for 2,000 draws
    assert min(len(p) for p in parts) >= 1


@pytest.mark.parametrize("name,kw", [("dirichlet", {"alpha": 0.3}), ("shards", {"classes_per_client": 2})])
def test_label_order_sorts_the_drawn_clients_by_mean_label(name, kw):
    """`order: label` keeps the drawn parts (same draws, same sets) and only sorts them by mean
    label, so the contiguous device groups hold correlated labels."""
    from emulator.workloads.partitions import in_label_order
    drawn = part(name, **kw)
    ordered = in_label_order(drawn, Y)
    assert sorted(map(tuple, drawn)) == sorted(map(tuple, ordered))
    means = [Y[p].mean() for p in ordered]
    assert means == sorted(means) and means[0] < 3.0 and means[-1] > 6.0
    assert [Y[p].mean() for p in drawn] != means            # the draw itself was not in order


def test_label_order_through_a_run_gives_groups_their_own_labels(tmp_path):
    import emulator
    from conftest import tiny
    sc = tiny(**{"workload.partition": {"name": "dirichlet", "alpha": 0.3, "order": "label"}, "clients.count": 10})
    sc["clients"]["groups"] = [dict(sc["clients"]["groups"][0], name="a", fraction=0.5),
                               dict(sc["clients"]["groups"][0], name="b", fraction=0.5)]
    res = emulator.run(sc, out=tmp_path / "r")
    import pandas as pd
    p = pd.read_csv(res.run_dir / "partition.csv")
    labels = np.arange(10)
    mean = (p[[f"label_{c}" for c in labels]].to_numpy() * labels).sum(1) / p["samples"].to_numpy()
    assert (np.diff(mean) >= 0).all()
    assert mean[p["group"] == "a"].max() <= mean[p["group"] == "b"].min()
    unordered = emulator.run(dict(sc, workload=dict(sc["workload"], partition={"name": "dirichlet", "alpha": 0.3})),
                             out=tmp_path / "u")
    q = pd.read_csv(unordered.run_dir / "partition.csv")
    assert sorted(q["samples"]) == sorted(p["samples"])         # the same draw, placed in label order
