"""The golden check's own machinery (`make golden`, tests/golden/): what it compares, what it
leaves out, and that the stored hashes cover exactly the cases."""
import json

import pytest

from tests.golden import golden
from tests.golden.cases import CASES


def test_csv_and_json_leave_out_wall_clock_and_machine_paths(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.csv").write_text("round,wall_time,test_acc\n1,0.123,0.5\n")
    (out / "m2.csv").write_text("round,wall_time,test_acc\n1,9.999,0.5\n")
    (out / "m3.csv").write_text("round,wall_time,test_acc\n1,0.123,0.51\n")
    a, b, c = (golden.normalized(out / f, out) for f in ("metrics.csv", "m2.csv", "m3.csv"))
    assert a == b == b"round,test_acc\n1,0.5\n" and a != c
    (out / "summary.json").write_text(json.dumps({"wall_time": 3.0, "virtual_time": 2.5, "torch_threads": 2,
                                                  "models": [{"reached_target": {"wall_time": 1, "round": 3}}]}))
    assert json.loads(golden.normalized(out / "summary.json", out)) == {
        "virtual_time": 2.5, "models": [{"reached_target": {"round": 3}}]}
    (out / "config.yaml").write_text(f"output:\n  dir: {out}\nplugins: [{golden.ROOT}/examples/x.py]\n")
    assert json.loads(golden.normalized(out / "config.yaml", out)) == {
        "output": {"dir": "<out>"}, "plugins": ["<root>/examples/x.py"]}
    long = "x" * 70          # a long path that YAML wraps at one root and not at another
    (out / "c2.yaml").write_text(f"a: '{golden.ROOT}/{long} {long}'\n")
    (out / "c3.yaml").write_text(f"a: '{golden.ROOT}/{long}\n  {long}'\n")
    assert golden.normalized(out / "c2.yaml", out) == golden.normalized(out / "c3.yaml", out)
    (out / "model.npy").write_bytes(b"\x00\x01")
    assert golden.normalized(out / "model.npy", out) == b"\x00\x01"


def test_compare_names_the_files_and_figures_that_moved():
    stored = {"cases": {"a": {"files": {"metrics.csv": "1", "model.npy": "2"}, "fingerprint": {"virtual_time": 4.0}}}}
    same = {"a": {"files": {"metrics.csv": "1", "model.npy": "2"}, "fingerprint": {"virtual_time": 4.0}}}
    assert golden.compare(stored, same) == []
    moved = {"a": {"files": {"metrics.csv": "9", "model.npy": "2", "events.csv": "3"},
                   "fingerprint": {"virtual_time": 4.5}}}
    assert golden.compare(stored, moved) == ["a: events.csv, metrics.csv differ", "    virtual_time: 4.0 -> 4.5"]
    assert golden.compare(stored, {"b": same["a"]}) == ["b: not in hashes.json (new case: run `make golden-update`)"]


def test_stored_hashes_cover_every_case_and_no_case_failed():
    stored = golden.load_stored()["cases"]
    assert set(stored) == set(CASES) and len(CASES) >= 40
    assert not [n for n, v in stored.items() if "error" in v["fingerprint"]]
    assert all({"config.yaml", "metrics.csv", "clients.csv", "summary.json"} <= set(v["files"]) for v in stored.values())


def test_update_needs_a_reason_and_check_refuses_unknown_cases(capsys):
    assert golden.main(["update"]) == 2
    assert golden.main(["check", "no_such_case"]) == 2
    assert "no_such_case" in capsys.readouterr().err
