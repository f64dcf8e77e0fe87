"""Results that regenerate (results/manifest.yaml, analysis/results.py; docs/results.md): the
manifest covers every figure the pages show, a quick variant run afresh gives its stored
numbers back, and a number planted beyond its seeds' spread fails the check, named with its
drift and tolerance."""
import json
import re
import subprocess

import pytest

from analysis import results as R

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CHEAP = "multimodel"          # the quickest quick variant: a quadratic, two seeds


def entry(name):
    return next(e for e in R.manifest() if e["name"] == name)


def test_manifest_covers_every_figure_and_names_real_files():
    entries = R.manifest()
    outputs = " ".join(str(o) for e in entries for o in e.get("outputs", []))
    figures = sorted(p.name for p in (R.ROOT / "docs" / "figures").iterdir())
    missing = [f for f in figures if f"docs/figures/{f}" not in outputs]
    assert not missing, f"figures no manifest entry regenerates: {missing}"
    for e in entries:
        for page in e["page"].split(", "):
            assert (R.ROOT / page).exists(), (e["name"], page)
        for cmd in e["full"] + ([e["quick"]["sweep"]] if e.get("quick") else []):
            for f in re.findall(r"(?:scenarios|docs)/[\w/.-]+\.(?:yaml|py)", cmd):
                assert (R.ROOT / f).exists(), (e["name"], f)
        if e.get("quick"):
            assert (R.STORED / f"{e['name']}.json").exists(), e["name"]
    assert {e["name"] for e in entries if e["kind"] == "benchmark"} >= {"performance", "fleet", "busy"}


@pytest.fixture(scope="module")
def cheap_sweep(tmp_path_factory):
    return R.run_quick(entry(CHEAP), tmp_path_factory.mktemp("quick"))


def test_a_quick_variant_gives_its_stored_numbers_back(cheap_sweep):
    stored = json.loads((R.STORED / f"{CHEAP}.json").read_text())
    fresh = R.quick_numbers(entry(CHEAP), cheap_sweep)
    assert set(fresh) == set(stored["numbers"]) and len(fresh) >= 2
    assert R.drifts(stored, fresh) == []
    assert all(n["seeds"] == 2 for n in fresh.values())


def test_a_planted_drift_fails_naming_the_number(cheap_sweep, tmp_path, monkeypatch, capsys):
    stored = json.loads((R.STORED / f"{CHEAP}.json").read_text())
    key = sorted(stored["numbers"])[0]
    n = stored["numbers"][key]
    fresh_value = n["value"]
    n["value"] += 3 * R.tolerance(n, stored["floor"])  # planted: three tolerances away
    tol = R.tolerance(n, stored["floor"])               # (its relative floor grows with it)
    (tmp_path / f"{CHEAP}.json").write_text(json.dumps(stored))
    bad = R.check(entry(CHEAP), stored_dir=tmp_path, sweep_dir=cheap_sweep)
    assert len(bad) == 1 and bad[0].startswith(f"{key}: stored {n['value']:.6g}, now "), bad
    assert f"drift {fresh_value - n['value']:+.3g} beyond tolerance {tol:.3g}" in bad[0], bad[0]
    # the command fails on it and says which number drifted
    monkeypatch.setattr(R, "STORED", tmp_path)
    monkeypatch.setattr(R, "run_quick", lambda e, out_root=None: cheap_sweep)
    assert R.main(["check", CHEAP]) == 1
    out = capsys.readouterr().out
    assert f"DRIFT {CHEAP}" in out and key in out and "1 of 1 quick variants drifted" in out


def test_tolerance_is_the_spread_with_a_floor():
    floor = {"abs": 0.002, "rel": 0.01}
    assert R.tolerance({"value": 0.5, "spread": 0.04}, floor) == 0.04          # the seeds' spread
    assert R.tolerance({"value": 0.5, "spread": 0.0}, floor) == pytest.approx(0.005)   # 1 % of the number
    assert R.tolerance({"value": 0.01, "spread": 0.0}, floor) == 0.002         # the absolute floor
    stored = {"floor": floor, "numbers": {"c | auc": {"value": 0.5, "spread": 0.04, "seeds": 2}}}
    near = {"c | auc": {"value": 0.539, "spread": 0.0, "seeds": 2}}
    far = {"c | auc": {"value": 0.541, "spread": 0.0, "seeds": 2}}
    assert R.drifts(stored, near) == [] and len(R.drifts(stored, far)) == 1
    assert R.drifts(stored, {}) == ["c | auc: stored 0.5, missing from the fresh run"]
    none = {"c | auc": {"value": None, "spread": None, "seeds": 0}}            # e.g. a target no seed reached
    assert "now None" in R.drifts(stored, none)[0]


def test_stamp_says_the_commit_and_a_dirty_tree(tmp_path):
    git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "f").write_text("a")
    git("add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()
    assert R.stamp(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "f").write_text("b")
    assert R.stamp(tmp_path) == {"commit": head, "dirty": True}
    assert R.stamp_text(R.stamp(tmp_path)) == f"commit {head} with uncommitted changes"


def test_keep_narrows_the_full_sweep_file(tmp_path):
    """A quick variant's `keep:` reads its conditions from the full sweep file: the variants and
    settings are the file's own, only fewer."""
    import yaml
    full = yaml.safe_load((R.ROOT / "scenarios/studies/availability.yaml").read_text())
    small = yaml.safe_load(R.narrowed(R.ROOT / "scenarios/studies/availability.yaml",
                                      {"clients.groups[*].availability": ["markov_time"], "variant": ["tsfl_dms"]},
                                      tmp_path / "a.yaml").read_text())
    assert small["variants"] == {"tsfl_dms": full["variants"]["tsfl_dms"]}
    assert small["grid"]["clients.groups[*].availability"] == [full["grid"]["clients.groups[*].availability"][4]]
    assert small["base"] == str(R.ROOT / "scenarios/studies/study_base.yaml")
    with pytest.raises(ValueError, match="not all of"):
        R.narrowed(R.ROOT / "scenarios/studies/stragglers.yaml", {"slow_share": ["0.3"]}, tmp_path / "b.yaml")


def test_a_folder_the_check_did_not_write_is_never_replaced(tmp_path):
    mine = tmp_path / CHEAP
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    with pytest.raises(SystemExit, match="not a sweep folder"):
        R.run_quick(entry(CHEAP), tmp_path)
    assert (mine / "notes.txt").read_text() == "a user's file"
