"""The timeline (`run.timeline: true` -> timeline.csv; `flemu timeline`, `flemu trace`):
its pieces add up to what clients.csv records, its offline periods are the availability the
run saw, the trace validates against the Trace Event format and gives back the same pieces,
the page is self-contained, bad input exits 2, and recording changes no number."""
import copy
import json
import re

import jsonschema
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import emulator
from analysis import timeline as TL
from emulator.cli import app
from tests.golden.cases import DEADLINE, avail

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MARKOV = {"model": "markov", "p_on_off": 0.3, "p_off_on": 0.5}
MARKOV_TIME = {"model": "markov_time", "mean_on": 3, "mean_off": 2}
ON = {"run.timeline": True, "run.rounds": 6}


def scenarios() -> dict:
    """Heterogeneous speeds (a constant and a lognormal device group, jittered links), a
    deadline, Markov availability: per round (the vector engine and the process engine; with
    downloads the deadline cuts) and in
    continuous time (clients go offline mid-work); FedAsync under `async`; T-SFL's intervals."""
    vec = avail(MARKOV, **{"protocol.wait": DEADLINE, **ON})
    proc = copy.deepcopy(vec)
    proc["protocol"]["engine"] = "process"
    slow = copy.deepcopy(proc)                  # the slow group's downloads outlast the deadline
    slow["clients"]["groups"][1]["network"] = {**slow["clients"]["groups"][1]["network"], "down_mbps": 0.015}
    return {
        "rounds_vector": vec,
        "rounds_slow_links": slow,
        "rounds_process": proc,
        "rounds_offline": avail(MARKOV_TIME, **{"protocol.wait": DEADLINE, **ON}),
        "async": avail(MARKOV_TIME, **{**ON, "run.rounds": 12, "protocol": {"name": "async", "local_steps": 5},
                                        "algorithm": {"name": "fedasync", "lr": 0.1}}),
        "intervals": avail(MARKOV_TIME, **{**ON, "protocol": {"name": "intervals", "interval": 1.5,
                                                               "iteration": "batch"}}),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("timeline")
    return {k: emulator.run(sc, out=root / k).run_dir for k, sc in scenarios().items()}


def pieces(run_dir) -> pd.DataFrame:
    return pd.read_csv(run_dir / "timeline.csv", keep_default_na=False, dtype={"cut": str})


@pytest.mark.parametrize("case", list(scenarios()))
def test_phases_add_up_to_recorded_seconds_and_bytes(runs, case):
    """Per client and round: download + compute + upload seconds = comm_time + compute_time,
    and their bytes = bytes_down + bytes_up; each piece starts where the one before ended."""
    p = pieces(runs[case])
    work = p[p["phase"] != "offline"].assign(s=lambda d: d["end"] - d["start"])
    cl = pd.read_csv(runs[case] / "clients.csv")
    key = [cl["round"], cl["client"]]
    want = (cl["comm_time"] + cl["compute_time"]).groupby(key).sum()
    want_b = (cl["bytes_up"] + cl["bytes_down"]).groupby(key).sum()
    got = work.groupby(["round", "client"])["s"].sum()
    got_b = work.groupby(["round", "client"])["bytes"].sum()
    want, want_b = want[want > 0], want_b[want > 0]
    assert sorted(got.index) == sorted(want.index)
    assert np.allclose(got[want.index], want, rtol=0, atol=1e-9)
    assert (got_b[want.index] == want_b).all()
    assert len(work) > 3 * len(want) // 2              # download, compute, upload pieces: not one lump each
    for _, g in work.groupby(["round", "client"]):
        g = g.sort_values("start")
        assert list(g["phase"]) == ["download", "compute", "upload"][:len(g)]
        assert np.array_equal(g["start"].to_numpy()[1:], g["end"].to_numpy()[:-1])    # back to back


def test_cut_and_offline_pieces_are_recorded(runs):
    """A deadline cuts work ("late"); going offline cuts it ("offline") and is drawn as offline."""
    cuts = pieces(runs["rounds_offline"])["cut"].value_counts()
    assert cuts.get("late", 0) > 0 and cuts.get("offline", 0) > 0
    p = pieces(runs["rounds_slow_links"])
    cut = p[(p["phase"] == "download") & (p["cut"] == "late")]
    assert len(cut) and (cut["bytes"] == 0).all()       # a cut download counts no bytes, as in clients.csv
    dropped = pd.read_csv(runs["rounds_offline"] / "clients.csv").query("dropped")
    p = pieces(runs["rounds_offline"])
    cut = p[p["cut"] != ""].set_index(["round", "client"])["cut"]
    assert sorted(cut.index) == sorted(zip(dropped["round"], dropped["client"]))
    assert (cut[list(zip(dropped["round"], dropped["client"]))].to_numpy() == dropped["drop_reason"].to_numpy()).all()


def test_offline_periods_are_the_availability_the_run_saw(runs):
    """Continuous time: a client is inside one of its offline periods at a round's start
    exactly when clients.csv says it was not available; per round: an offline row per
    (round, client) not available."""
    d = runs["rounds_offline"]
    p, cl = pieces(d), pd.read_csv(d / "clients.csv")
    rf = TL.round_frame(d).set_index("round")
    off = p[p["phase"] == "offline"]
    assert len(off) and (off["round"] == 0).all()
    for r, c, av in zip(cl["round"], cl["client"], cl["available"]):
        t = rf.loc[r, "start"]
        o = off[off["client"] == c]
        inside = bool(((o["start"] <= t) & (t < o["end"])).any())
        assert inside == (not av), (r, c)
    p, cl = pieces(runs["rounds_vector"]), pd.read_csv(runs["rounds_vector"] / "clients.csv")
    off = p[p["phase"] == "offline"]
    assert sorted(zip(off["round"], off["client"])) == sorted(zip(*cl.loc[~cl["available"], ["round", "client"]].T.values))


def test_recording_changes_no_number(runs, tmp_path):
    """With run.timeline off (the default) there is no timeline.csv, and the run's numbers
    (clients.csv, partition.csv, the model; metrics.csv but its wall-clock column) are
    byte-identical to the run that recorded one."""
    sc = scenarios()["rounds_offline"]
    del sc["run"]["timeline"]
    off = emulator.run(sc, out=tmp_path / "off").run_dir
    on = runs["rounds_offline"]
    assert not (off / "timeline.csv").exists()
    assert sorted(f.name for f in on.iterdir()) == sorted([f.name for f in off.iterdir()] + ["timeline.csv"])
    for f in ("clients.csv", "partition.csv", "model.npy"):
        assert (off / f).read_bytes() == (on / f).read_bytes(), f
    m_off, m_on = (pd.read_csv(d / "metrics.csv").drop(columns="wall_time") for d in (off, on))
    assert m_off.equals(m_on)                    # wall-clock time aside
    assert "timeline" not in (off / "config.yaml").read_text()


EVENT = {   # the Trace Event format (JSON object form): what Perfetto and chrome://tracing read
    "type": "object", "required": ["name", "ph", "pid", "tid"],
    "properties": {"name": {"type": "string"}, "cat": {"type": "string"}, "ph": {"enum": ["X", "M", "i"]},
                   "ts": {"type": "number"}, "dur": {"type": "number", "minimum": 0},
                   "pid": {"type": "integer"}, "tid": {"type": "integer"}, "args": {"type": "object"},
                   "s": {"enum": ["g", "p", "t"]}},
    "allOf": [{"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur", "cat"]}},
              {"if": {"properties": {"ph": {"const": "i"}}}, "then": {"required": ["ts"]}},
              {"if": {"properties": {"ph": {"const": "M"}}}, "then": {"required": ["args"]}}],
}
TRACE = {"type": "object", "required": ["traceEvents"],
         "properties": {"traceEvents": {"type": "array", "items": EVENT}, "displayTimeUnit": {"enum": ["ms", "ns"]}}}


@pytest.mark.parametrize("case", ["rounds_offline", "async"])
def test_trace_validates_and_round_trips_the_pieces(runs, case, tmp_path):
    out = tmp_path / "run.json"
    res = CliRunner().invoke(app, ["trace", str(runs[case]), "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, TRACE)
    ev = doc["traceEvents"]
    x = [e for e in ev if e["ph"] == "X" and e["pid"] != 0]
    back = pd.DataFrame({"client": [e["tid"] for e in x], "round": [e["args"]["round"] for e in x],
                         "phase": [e["name"] for e in x], "start": [e["ts"] / 1e6 for e in x],
                         "end": [(e["ts"] + e["dur"]) / 1e6 for e in x], "bytes": [e["args"]["bytes"] for e in x]})
    p = pieces(runs[case])
    cols = ["client", "round", "phase"]
    back = back.sort_values(cols + ["start"]).reset_index(drop=True)
    p = p.sort_values(cols + ["start"]).reset_index(drop=True)
    assert back[cols + ["bytes"]].equals(p[cols + ["bytes"]])
    assert np.allclose(back[["start", "end"]], p[["start", "end"]], rtol=1e-12, atol=1e-12)
    part = pd.read_csv(runs[case] / "partition.csv")
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    pid_of = {e["args"]["name"]: e["pid"] for e in ev if e["name"] == "process_name"}
    assert {(pid_of[f"group {g}"], c): f"client {c}" for c, g in zip(part["client"], part["group"])} == names
    assert all(pid_of[f"group {g}"] == e["pid"] for e in x for c, g in [(e["tid"], part["group"][e["tid"]])])
    rounds = [e for e in ev if e["ph"] == "X" and e["pid"] == 0]
    agg = pd.read_csv(runs[case] / "metrics.csv").query("round >= 1")["virtual_time"].to_numpy()
    assert np.allclose([(e["ts"] + e["dur"]) / 1e6 for e in rounds], agg, rtol=1e-12)


def test_timeline_page_is_self_contained(runs, tmp_path):
    """PNG and HTML written; the page fetches nothing (no http(s) src or href, no external
    script or stylesheet) and carries every piece of the window."""
    png = tmp_path / "tl.png"
    res = CliRunner().invoke(app, ["timeline", str(runs["rounds_offline"]), "-o", str(png)])
    assert res.exit_code == 0, res.output
    assert png.read_bytes().startswith(b"\x89PNG")
    page = png.with_suffix(".html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"<script[^>]*\bsrc\b|<link\b|@import|url\(", page, re.I)
    data = json.loads(re.search(r'<script type="application/json" id="tl-data">(.*?)</script>', page, re.S)
                      .group(1).replace("<\\/", "</"))
    work = [b for b in data["bars"] if b[1] != "idle"]
    assert len(work) == len(pieces(runs["rounds_offline"]))
    res = CliRunner().invoke(app, ["timeline", str(runs["rounds_offline"]), "-o", str(png)])
    assert res.exit_code == 0, res.output        # flemu replaces its own page and figure


def test_window_of_rounds_and_clients(runs):
    d = runs["rounds_offline"]
    rf = TL.round_frame(d).set_index("round")
    tl = TL.load(d, TL.parse_rounds("2:3"), 3)
    assert (tl.t0, tl.t1) == (rf.loc[2, "start"], rf.loc[3, "end"])
    assert tl.spans["start"].min() >= tl.t0 and tl.spans["end"].max() <= tl.t1
    assert tl.clients == [0, 1, 4]                 # in turn from each group: fast 0, slow 4, fast 1
    assert {2, 3} <= set(tl.rounds["round"]) <= {1, 2, 3, 4}     # the window's rounds and its edges' marks
    for c in tl.clients:                            # every instant of the window is drawn once
        s = tl.spans[tl.spans["client"] == c]
        assert s["end"].sub(s["start"]).sum() == pytest.approx(tl.t1 - tl.t0, abs=1e-9)


@pytest.mark.parametrize("text,want", [("3:8", (3, 8)), ("5", (5, 5)), ("3:", (3, None)), (":8", (None, 8)),
                                       (None, None)])
def test_parse_rounds(text, want):
    assert TL.parse_rounds(text) == want


@pytest.mark.parametrize("bad,says", [("8:3", "FIRST <= LAST"), ("0:2", ">= 1"), ("a:b", "FIRST:LAST"),
                                      (":", "FIRST:LAST"), ("1-3", "FIRST:LAST"), ("99:100", "no such round")])
def test_bad_rounds_exit_2(runs, tmp_path, bad, says):
    png = tmp_path / "tl.png"
    res = CliRunner().invoke(app, ["timeline", str(runs["rounds_vector"]), "--rounds", bad, "-o", str(png)])
    assert res.exit_code == 2 and "--rounds" in res.output and "Traceback" not in res.output, res.output
    assert says in res.output, res.output
    assert not png.exists() and not png.with_suffix(".html").exists()


def test_no_timeline_csv_says_how(tmp_path, runs):
    sc = scenarios()["rounds_vector"]
    del sc["run"]["timeline"]
    d = emulator.run(sc, out=tmp_path / "plain").run_dir
    for cmd in (["timeline", str(d)], ["trace", str(d), "-o", str(tmp_path / "t.json")]):
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 2 and "run.timeline: true" in res.output, res.output
    assert not (tmp_path / "t.json").exists() and not (d / "timeline.png").exists()


def test_bad_run_timeline_value_exit_2(tmp_path):
    import yaml
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(scenarios()["rounds_vector"]))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(f), "--set", "run.timeline=maybe", "--out", str(out), "-q"])
    assert res.exit_code == 2 and "run.timeline" in res.output and "Traceback" not in res.output, res.output
    assert not out.exists()


def test_report_draws_the_timeline(runs, tmp_path):
    """`flemu report` of a run with timeline.csv draws its timeline (rounds 1-10, at most 40
    clients)."""
    from analysis import report
    path = report.write(runs["rounds_offline"], out=tmp_path / "r" / "report.html")
    assert (tmp_path / "r" / "figures" / "timeline.png").exists()
    assert "Timeline: rounds_offline" in path.read_text()


def test_the_offline_periods_of_a_large_fleet_make_no_client_objects():
    """timeline.csv's offline periods are read per device group (sim/timeline.py), so a fleet's
    untouched clients stay without a Client object (sim/fleet.py), yet their offline rounds are there."""
    from emulator.scenario import schema
    from emulator.sim.world import World
    sc = avail(MARKOV, **{"run.rounds": 2, "run.timeline": True})
    sc["clients"]["count"] = 400
    for g in sc["clients"]["groups"]:
        g["count"] = 200
    sc["workload"]["partition"] = {"name": "iid"}
    w = World(schema.load(sc))
    w.run()
    frame = w.recorder.timeline_frame(w.clients, float(w.env.now))
    off = frame[frame["phase"] == "offline"]
    assert off["client"].nunique() > 100                        # most of the fleet was offline some round
    assert w.clients.touched < 100, w.clients.touched            # yet only the selected ones were made


@pytest.fixture(scope="module")
def fleet_1000(tmp_path_factory):
    """1,000 clients in two device groups of 500 (Markov availability, two rounds), timeline on."""
    sc = avail(MARKOV, **{"run.rounds": 2, "run.timeline": True})
    sc["clients"]["count"] = 1000
    for g in sc["clients"]["groups"]:
        g["count"] = 500
    sc["workload"]["partition"] = {"name": "iid"}
    return emulator.run(sc, out=tmp_path_factory.mktemp("fleet") / "run").run_dir


def _drawn(page) -> dict:
    """The clients the interactive page draws: id -> device group."""
    html = page.read_text()
    data = json.loads(re.search(r'<script type="application/json" id="tl-data">(.*?)</script>', html, re.S)
                      .group(1).replace("<\\/", "</"))
    return {int(c): g for c, g in data["groups"].items()}


def test_timeline_of_a_large_fleet_draws_the_default_cap(fleet_1000, tmp_path):
    """`flemu timeline` on 1,000 clients draws TL.DEFAULT_CLIENTS (200), 100 from each device
    group, and says how many it left out; --clients N and --all-clients override it."""
    png = tmp_path / "tl.png"
    res = CliRunner().invoke(app, ["timeline", str(fleet_1000), "-o", str(png)])
    assert res.exit_code == 0, res.output
    drawn = _drawn(png.with_suffix(".html"))
    assert TL.DEFAULT_CLIENTS == 200 and len(drawn) == 200
    assert sorted(pd.Series(drawn).value_counts().tolist()) == [100, 100]       # evenly across the groups
    assert "drew 200 of the run's 1,000 clients (800 left out" in " ".join(res.output.split()), res.output
    res = CliRunner().invoke(app, ["timeline", str(fleet_1000), "-o", str(png), "--clients", "7"])
    assert res.exit_code == 0 and len(_drawn(png.with_suffix(".html"))) == 7, res.output
    assert "(993 left out" in " ".join(res.output.split()), res.output
    tl = TL.load(fleet_1000, None, None)                                        # --all-clients: every client
    assert len(tl.clients) == 1000 and tl.left_out == 0


def test_clients_and_all_clients_together_exit_2(fleet_1000, tmp_path):
    png = tmp_path / "tl.png"
    res = CliRunner().invoke(app, ["timeline", str(fleet_1000), "-o", str(png), "--clients", "5", "--all-clients"])
    assert res.exit_code == 2 and "--all-clients" in res.output and "Traceback" not in res.output, res.output
    assert not png.exists()
