"""Hostile numbers in time models (issue 28, sections 2 and 3): every float of every time model is
finite and within its documented range (devices/limits.py), or one error naming the YAML path
and what is allowed. The cheap cases go through the Python API; a few run the real `flemu run`
command and check exit 2, no traceback, nothing written, and a sentinel folder untouched."""
from __future__ import annotations

import hashlib
import math
import os

import pytest
import yaml
from typer.testing import CliRunner

from conftest import tiny
from devices import limits
from emulator import registry
from emulator.scenario import schema as scenario
from emulator.cli import app
from emulator.errors import ScenarioError

INF, NAN = math.inf, math.nan
G = "clients.groups[0]"


def group(**blocks):
    def mutate(sc):
        sc["clients"]["groups"][0].update(blocks)
    return mutate


def settings(**kw):
    def mutate(sc):
        sc.setdefault("network", {}).update(kw)
    return mutate


def run_block(**kw):
    def mutate(sc):
        sc["run"].update(kw)
    return mutate


LINK = {"latency": 0.01, "up_mbps": 10, "down_mbps": 10}
# (id, mutation, the one YAML path named, words of what is allowed)
CASES = [
    ("lognormal sigma inf", group(compute={"model": "lognormal", "mean_step_time": 0.1, "sigma": INF}),
     f"{G}.compute.sigma", "allowed: a finite number > 0, <= 5"),
    ("uniform high inf", group(compute={"model": "uniform", "low": 0.1, "high": INF}),
     f"{G}.compute.high", "allowed: a finite number >= 1e-06, <= 1e+09"),
    ("iterations mean nan", group(compute={"model": "iterations", "mean": NAN}),
     f"{G}.compute.mean", "allowed: a finite number >= -1e+09, <= 1e+09"),
    ("constant step time 1e300", group(compute={"model": "constant", "step_time": 1e300}),
     f"{G}.compute.step_time", "less than or equal to 1000000000"),
    ("constant step time 1e-320", group(compute={"model": "constant", "step_time": 1e-320}),
     f"{G}.compute.step_time", "greater than or equal to 0.000001"),
    ("sine period 1e-320", group(availability={"model": "sine", "period": 1e-320}),
     f"{G}.availability.period", "greater than or equal to 0.000001"),
    ("overhead bytes 1e20", settings(overhead_bytes=1e20), "network.overhead_bytes",
     "allowed: a whole number >= 0, <= 1073741824"),
    ("overhead bytes 2**62", settings(overhead_bytes=2 ** 62), "network.overhead_bytes",
     "less than or equal to 1073741824"),
    ("bytes per param 1e18", settings(bytes_per_param=10 ** 18), "network.bytes_per_param",
     "less than or equal to 16"),
    ("up mbps 1e-30", group(network={**LINK, "up_mbps": 1e-30}), f"{G}.network.up_mbps",
     "greater than or equal to 0.001"),
    ("jitter inf", group(network={**LINK, "jitter": INF}), f"{G}.network.jitter",
     "allowed: a finite number >= 0, <= 1e+09"),
    ("latency lost to rounding", group(network={**LINK, "latency": 1e-300}), f"{G}.network.latency",
     "0 or at least 1e-06 s"),
    ("spread inf", group(network={**LINK, "spread": INF}), f"{G}.network.spread",
     "allowed: a finite number >= 0, <= 5"),
    ("virtual time inf", run_block(virtual_time=INF), "run.virtual_time",
     "allowed: a finite number > 0, <= 1e+09"),
    ("markov_time mean_on inf", group(availability={"model": "markov_time", "mean_on": INF, "mean_off": 60}),
     f"{G}.availability.mean_on", "allowed: a finite number >= 1e-06, <= 1e+09"),
    ("diurnal phase nan", group(availability={"model": "diurnal", "phase": NAN}),
     f"{G}.availability.phase", "finite number"),
    ("diurnal never online", group(availability={"model": "diurnal", "mean": 0.0, "amplitude": 0.0}),
     f"{G}.availability", "never be online"),
    ("bernoulli uniform nan", group(availability={"model": "bernoulli", "p": {"uniform": [NAN, 1]}}),
     f"{G}.availability.p", "{uniform: [lo, hi]} needs finite 0 <= lo <= hi <= 1; got [nan, 1]"),
    ("bernoulli beta -1", group(availability={"model": "bernoulli", "p": {"beta": [-1, 2]}}),
     f"{G}.availability.p", "{beta: [a, b]} needs finite a > 0 and b > 0 (at most 1e6); got a = -1"),
    ("bernoulli list nan", group(availability={"model": "bernoulli", "p": [0.5, NAN]}),
     f"{G}.availability.p", "item [1] is nan"),
    ("topology node with no links", settings(topology={"nodes": ["s", "edge"], "links": [], "server": "s",
                                                       "attach": {"g": "edge"}}),
     "network.topology", "['edge'] have no path of links to the server's node 's'"),
    ("server link latency nan", settings(server_link={"up_mbps": 10, "down_mbps": 10, "latency": NAN}),
     "network.server_link.latency", "finite number"),
    ("energy watts inf", group(energy={"compute_watts": INF, "transmit_watts": 1}), f"{G}.energy.compute_watts",
     "finite number"),
]


@pytest.mark.parametrize("mutate,path,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_hostile_number_is_one_error_naming_its_path_and_what_is_allowed(mutate, path, words):
    sc = tiny()
    mutate(sc)
    with pytest.raises(ScenarioError) as e:
        scenario.load(sc)
    assert len(e.value.problems) == 1, e.value.problems
    where, msg = e.value.problems[0]
    assert where == path and words in msg, (where, msg)


TIME_KINDS = ("compute", "network", "availability")


def _floats(model) -> list:
    import typing
    out = []
    for name, f in model.model_fields.items():
        args = {f.annotation, *typing.get_args(f.annotation)}
        if float in args or any(float in typing.get_args(a) for a in args):
            out.append((name, f))
    return out


def test_every_float_of_every_time_model_is_finite_and_bounded_above():
    """The property behind the cases above, over every registered time model and the fleet-wide
    settings: no float field accepts inf or NaN, and each has an upper bound (a probability, a
    phase, a ratio, or devices/limits.py's MAX_*), except where a model validator bounds it."""
    models = [e.params for k in TIME_KINDS for e in registry.table(k).values()]
    S = scenario.schema()
    net = S.model_fields["network"].annotation
    models += [net, S.model_fields["run"].annotation]
    models += [m.annotation for m in net.model_fields.values() if hasattr(m.annotation, "model_fields")]
    unbounded, checked = [], 0
    for m in models:
        assert m.model_config.get("allow_inf_nan") is False, m.__name__
        for name, f in _floats(m):
            checked += 1
            ups = [getattr(c, k) for c in f.metadata for k in ("le", "lt") if getattr(c, k, None) is not None]
            if not ups or max(ups) > limits.MAX_SECONDS:
                unbounded.append(f"{m.__name__}.{name}")
    assert checked >= 40 and unbounded == [], unbounded


# ---------------------------------------------------------------------------- through the CLI
def _tree(folder) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def sentinel(tmp_path):
    """A folder that looks like earlier work (a run directory and a note): nothing may touch it."""
    s = tmp_path / "runs"
    (s / "earlier").mkdir(parents=True)
    (s / "earlier" / "metrics.csv").write_text("round,test_acc\n0,0.1\n")
    (s / "note.txt").write_text("keep me")
    return s, _tree(s)


CLI_CASES = [CASES[0], CASES[7], CASES[13], CASES[17]]


@pytest.mark.parametrize("mutate,path,words", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_flemu_run_refuses_with_exit_2_and_writes_nothing(tmp_path, sentinel, mutate, path, words):
    sc = tiny()
    mutate(sc)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(sc))
    before = sorted(os.listdir(tmp_path))
    res = CliRunner().invoke(app, ["run", str(f), "--out", str(sentinel[0] / "new"), "-q"])
    assert res.exit_code == 2, res.output
    text = res.output
    assert "Traceback" not in text and isinstance(res.exception, SystemExit)
    assert text.splitlines()[0] == f"{f}: 1 problem in the scenario:"
    assert text.splitlines()[1].startswith(f"  {path}: ") and words in text
    assert sorted(os.listdir(tmp_path)) == before
    assert _tree(sentinel[0]) == sentinel[1] and not (sentinel[0] / "new").exists()


def test_flemu_run_reports_every_hostile_number_at_once(tmp_path, sentinel):
    """Three hostile numbers in three blocks are one error with three lines, exit 2 (the real
    `flemu` process is run once in tests/test_fuzz.py)."""
    sc = tiny()
    sc["clients"]["groups"][0]["compute"] = {"model": "lognormal", "mean_step_time": 0.1, "sigma": INF}
    sc["network"] = {"overhead_bytes": 2 ** 62}
    sc["run"]["virtual_time"] = INF
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(sc))
    res = CliRunner().invoke(app, ["run", str(f), "--out", str(sentinel[0] / "x"), "-q"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert lines[0] == f"{f}: 3 problems in the scenario:"
    assert [ln.split(":")[0].strip() for ln in lines[1:]] == [
        f"{G}.compute.sigma", "run.virtual_time", "network.overhead_bytes"]
    assert _tree(sentinel[0]) == sentinel[1] and sorted(os.listdir(tmp_path)) == ["bad.yaml", "runs"]


# ---------------------------------------------------------------------------- at build time
def test_a_group_refused_when_built_names_its_block(run_in):
    """A per-client probability list of the wrong length is only known once the fleet is built:
    the error names the availability block (it named only clients.groups[0])."""
    sc = tiny()
    sc["clients"]["groups"][0]["availability"] = {"model": "bernoulli", "p": [0.5, 0.5]}
    with pytest.raises(ScenarioError) as e:
        run_in(sc)
    assert e.value.problems == [(f"{G}.availability", "2 probabilities for a group of 6 clients")]


def test_a_valid_probability_distribution_survives_the_dump(tmp_path):
    """`bernoulli.p: {uniform: [lo, hi]}` is re-dumped as given (a NaN once became None)."""
    sc = tiny()
    sc["clients"]["groups"][0]["availability"] = {"model": "bernoulli", "p": {"uniform": [0.25, 1]}}
    again = scenario.load(yaml.safe_load(scenario.to_yaml(scenario.load(sc))))
    assert again.clients.groups[0].availability.p == {"uniform": [0.25, 1]}


def test_a_run_past_the_resolved_horizon_stalls_with_the_reason(run_in):
    """Each duration within its bounds, but a round of 5 x 4e8 s steps ends at 2e9 s, past the
    1e9 s up to which float64 seconds resolve 1e-6 s: the run stops `stalled`, keeping round 1."""
    sc = tiny(**{"run.rounds": 3})
    sc["clients"]["groups"][0]["compute"] = {"model": "constant", "step_time": 4e8}
    res = run_in(sc)
    s = res.summary
    assert (s["status"], s["rounds"]) == ("stalled", 1)
    assert s["message"].startswith("virtual time 2e+09 s passed 1e+09 s")
    link = 0.01 + 2600 * 8 / 10e6                  # latency + logreg's 650 float32 parameters at 10 Mbit/s
    assert res.metrics["virtual_time"].tolist() == [0.0, pytest.approx(5 * 4e8 + 2 * link, abs=1e-6)]
