"""Property-based scenarios (issue 16): valid scenarios drawn from the registry's parameter
models must run to a documented status, keep every invariant (emulator/runs/invariants.py in the
run, tests/fuzz/checks.py on the files), replay exactly from their config.yaml and give the same
records under the sequential and batched executors; a valid scenario with one field broken
must exit 2 from `flemu run` with one message naming its path, and write nothing; so must
hostile input (tests/fuzz/hostile.py: non-finite and extreme numbers in every time-model field,
broken trace files and paths, hostile names; broken .npz arrays and FedScale pickles likewise).

`make test` runs a few derandomized examples of each property; `make fuzz` runs thousands
(HYPOTHESIS_PROFILE=fuzz, tests/fuzz/profiles.py) with hypothesis's example database, so a
failure replays first on the next run. Every failure found becomes a plain test in
tests/test_fuzz_regressions.py.
"""
from __future__ import annotations

import contextlib
import copy
import json
import signal
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, event, given, reject, strategies as st

from fuzz import checks
from fuzz.hostile import (broken_trace, hostile_name, hostile_npz, hostile_number, hostile_path, hostile_pickle,
                          number_candidates, with_value)
from fuzz.malformed import fmt
from fuzz.malformed import malformed
from fuzz.params import NOT_DRAWN, Ctx, component, generic_components
from fuzz.profiles import PROFILE, examples
from fuzz.scenarios import CLASSIFIER_DATA, QUADRATIC_DATA, materialize, scenarios

# a run of a drawn scenario takes well under a second; this catches infinite loops
WALL_LIMIT_S = 120


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # conftest.py


class TooLong(Exception):
    pass


@contextlib.contextmanager
def wall_limit(seconds: int):
    def ring(*_):
        raise TooLong(f"the run took more than {seconds} s of wall time (an infinite loop?)")
    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# Errors a valid scenario may still meet when its data are built (documented bad input: a
# Dirichlet draw that leaves a client without samples); the example is discarded.
ALLOWED_BUILD_ERRORS = (".partition.min_size", ".partition")


def run(source, out):
    import emulator
    from emulator.errors import ScenarioError
    with wall_limit(WALL_LIMIT_S):
        try:
            return emulator.run(source, out=out)
        except ScenarioError as e:
            if all(p.endswith(ALLOWED_BUILD_ERRORS) for p, _ in e.problems):
                event("discarded: partition left a client without samples")
                reject()
            raise


# ---------------------------------------------------------------------------- valid scenarios
@examples(ci=10)
@given(drawn=scenarios())
@pytest.mark.slow
def test_valid_scenarios_finish_keep_every_invariant_and_replay_exactly(drawn):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sc = materialize(drawn, tmp / "files")
        a = run(sc, tmp / "a")                 # emulator/runs/invariants.py runs inside: a violation raises
        event(f"protocol {sc['protocol']['name']}: {a.summary['status']}")
        problems = checks.check_all(a.run_dir)
        assert not problems, "\n".join(problems)
        b = run(a.run_dir / "config.yaml", tmp / "b")      # the resolved scenario, same seed
        diff = checks.compare(a.run_dir, b.run_dir)
        assert not diff, "not reproduced from config.yaml:\n" + "\n".join(diff)


@examples(ci=6, fuzz_share=0.5)
@given(drawn=scenarios())
def test_sequential_and_batched_executors_give_the_same_records(drawn):
    """Same scenario, float64, on either executor: every record equal to a float tolerance
    (batched refuses BatchNorm models; none is drawn)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sc = materialize(drawn, tmp / "files")
        dirs = []
        for name in ("sequential", "batched"):
            s = copy.deepcopy(sc)
            s["executor"] = {"name": name, "device": "cpu", "dtype": "float64"}
            dirs.append(run(s, tmp / name).run_dir)
        diff = checks.compare(*dirs, rtol=1e-6, atol=1e-9)
        assert not diff, "sequential != batched:\n" + "\n".join(diff)


# ---------------------------------------------------------------------------- malformed scenarios
@examples(ci=25, fuzz_share=2.0)
@given(broken=malformed(scenarios(max_clients=12)))
@pytest.mark.slow
def test_a_malformed_scenario_exits_2_with_one_message_naming_its_path(broken):
    from typer.testing import CliRunner

    from emulator.scenario import schema as scenario
    from emulator.cli import app
    from emulator.errors import ScenarioError

    event(f"break: {broken.how}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw = materialize(broken.drawn, tmp / "files")
        f = tmp / "bad.yaml"
        f.write_text(yaml.safe_dump(raw, sort_keys=False))
        with pytest.raises(ScenarioError):       # the break must break it (else: a gap in validation)
            scenario.load(f)
        before = sorted(p.name for p in tmp.iterdir())
        out = tmp / "run"
        res = CliRunner().invoke(app, ["run", str(f), "--out", str(out), "-q"])
        assert res.exit_code == 2, res.output
        text = (res.stderr if res.stderr else res.output).strip().splitlines()
        assert text[0] == f"{f}: 1 problem in the scenario:", "\n".join(text)
        assert len(text) == 2 and text[1].startswith(f"  {broken.path}: "), "\n".join(text)
        assert not out.exists() and sorted(p.name for p in tmp.iterdir()) == before


@pytest.mark.slow
def test_the_flemu_command_itself_exits_2_and_writes_nothing(tmp_path):
    """Once through a real `flemu run` process (the entry point, not typer's test runner)."""
    import os
    import subprocess
    import sys

    from conftest import tiny
    sc = tiny()
    sc["clients"]["groups"][0]["compute"]["step_time"] = -0.1
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(sc))
    res = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(f), "--out", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines == [f"{f}: 1 problem in the scenario:",
                     "  clients.groups[0].compute.step_time: Input should be greater than or equal to 0.000001 (got -0.1)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


# ---------------------------------------------------------------------------- the generator itself
def test_the_generator_draws_every_registered_component_or_says_why_not():
    from emulator import registry
    drawn = {"dataset": set(CLASSIFIER_DATA + QUADRATIC_DATA), "model": {"logreg", "mlp", "quadratic"},
             "partition": {"iid", "dirichlet", "shards", "lognormal", "natural"}}
    for kind, names in drawn.items():
        skipped = {n for k, n in NOT_DRAWN if k == kind}
        assert set(registry.table(kind)) == names | skipped, kind
    for name, e in registry.table("algorithm").items():
        assert e.factory.supports & set(registry.table("protocol")), f"{name} runs under no protocol"
    if PROFILE == "ci":
        print("components fuzzed with the generic strategy (no hand-tuned one):", generic_components() or "none")


KINDS = ("compute", "network", "availability", "selection", "executor", "algorithm")


@pytest.mark.parametrize("kind", KINDS)
@examples(ci=15)
@given(data=st.data())
def test_every_component_strategy_gives_valid_parameters(kind, data):
    from emulator import registry
    from emulator.scenario import schema as scenario
    name = data.draw(st.sampled_from(sorted(registry.table(kind))))
    n = data.draw(st.integers(1, 8))
    ctx = Ctx(n=n, size=data.draw(st.integers(0, n)))
    params = data.draw(component(kind, name, ctx))
    from fuzz.scenarios import Drawn
    with tempfile.TemporaryDirectory() as tmp:
        kw = materialize(Drawn(params, ctx.files), tmp)
        got = scenario.member(kind, name, **kw).model_dump(mode="json")
    tag = "model" if kind in ("compute", "network", "availability", "selection") else "name"
    assert got[tag] == name
    missing = _not_kept(json.loads(json.dumps(kw)), got)
    assert not missing, f"{kind} {name}: drawn values the validated parameters do not hold: {missing}"


def _not_kept(drawn, got, at="") -> list:
    """Where the validated parameters (`got`, defaults filled in) differ from what was drawn
    (numbers compared as numbers: an int drawn for a float field is kept)."""
    if isinstance(drawn, dict) and isinstance(got, dict):
        return [x for k, v in drawn.items() for x in _not_kept(v, got.get(k, "<absent>"), f"{at}.{k}")]
    if isinstance(drawn, list) and isinstance(got, list) and len(drawn) == len(got):
        return [x for i, (a, b) in enumerate(zip(drawn, got)) for x in _not_kept(a, b, f"{at}[{i}]")]
    return [] if drawn == got else [f"{at}: {drawn!r} -> {got!r}"]


# ---------------------------------------------------------------------------- hostile input (issue 28)
def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused_by_flemu_run(h, words=None):
    """`flemu run` on the hostile scenario: exit 2, no traceback, one problem naming h.path, the
    scenario's folder and a sentinel run folder untouched, no run directory."""
    from typer.testing import CliRunner

    from emulator.scenario import schema as scenario
    from emulator.cli import app
    from emulator.errors import ScenarioError

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw = materialize(h.drawn, tmp / "files")
        f = tmp / "bad.yaml"
        f.write_text(yaml.safe_dump(raw, sort_keys=False))
        with pytest.raises(ScenarioError) as e:
            scenario.load(f)
        assert [p for p, _ in e.value.problems] == [h.path], e.value.problems
        (tmp / "runs" / "earlier").mkdir(parents=True)
        (tmp / "runs" / "earlier" / "summary.json").write_text('{"status": "complete"}')
        before = _tree(tmp)
        res = CliRunner().invoke(app, ["run", str(f), "--out", str(tmp / "runs" / "new"), "-q"])
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
        lines = res.output.strip().splitlines()
        assert "Traceback" not in res.output and lines[0] == f"{f}: 1 problem in the scenario:", res.output
        assert len(lines) == 2 and lines[1].startswith(f"  {h.path}: "), res.output
        assert words is None or words in lines[1], (words, lines[1])
        assert _tree(tmp) == before


@examples(ci=8)
@given(drawn=scenarios(max_clients=12))
@pytest.mark.slow
def test_every_non_finite_or_extreme_number_in_a_time_model_is_refused_naming_its_path(drawn):
    """Every numeric field of every time model of a drawn scenario, each of its hostile values
    in turn (the Python API: one ScenarioError naming that field)."""
    from emulator.scenario import schema as scenario
    from emulator.errors import ScenarioError
    cands = number_candidates(drawn.scenario)
    assume(cands)
    with tempfile.TemporaryDirectory() as tmp:
        raw = materialize(drawn, tmp)
        for keys, bad in cands:
            with pytest.raises(ScenarioError) as e:
                scenario.load(with_value(raw, keys, bad))
            assert [p for p, _ in e.value.problems] == [fmt(keys)], (bad, e.value.problems)
    event(f"{len(cands)} hostile values")


@examples(ci=6)
@given(h=hostile_number(scenarios(max_clients=12)))
def test_a_non_finite_or_extreme_number_in_a_time_model_exits_2_naming_its_path(h):
    event(f"hostile number at {h.path.split('.')[-1]}")
    _refused_by_flemu_run(h)


@examples(ci=6)
@given(h=broken_trace(scenarios(max_clients=12)))
def test_a_broken_trace_file_exits_2_naming_the_file(h):
    name = h.detail.split(":")[0]
    event(f"broken trace: {h.detail.split(': ')[1]}")
    _refused_by_flemu_run(h, words=name)


@examples(ci=5)
@given(h=hostile_path(scenarios(max_clients=12)))
def test_a_hostile_trace_path_exits_2_naming_it(h):
    event(f"trace path {h.detail}")
    _refused_by_flemu_run(h)


@examples(ci=4)
@given(h=hostile_name(scenarios(max_clients=6)))
def test_a_hostile_scenario_name_exits_2(h):
    _refused_by_flemu_run(h)


@examples(ci=8)
@given(case=hostile_npz())
def test_hostile_npz_arrays_are_one_error_naming_the_dataset_path(case):
    import numpy as np

    from emulator.scenario import schema as scenario
    from emulator.errors import ScenarioError
    from emulator.workloads import datasets as D
    arrays, how, words = case
    event(f"npz: {how}")
    from conftest import tiny
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "d.npz"
        np.savez(f, **arrays)
        ctx = D.DatasetContext(num_clients=2, rng_data=np.random.default_rng(0), rng_split=np.random.default_rng(1))
        sc = tiny()
        sc["workload"]["dataset"] = {"name": "npz", "path": str(f)}
        with pytest.raises(ScenarioError) as e:
            D.npz(scenario.load(sc).workload.dataset, ctx)       # validation, then the feature values
    [(path, msg)] = e.value.problems
    assert path == "workload.dataset.path" and str(f) in msg and words in msg, msg


@examples(ci=8)
@given(case=hostile_pickle())
def test_a_hostile_fedscale_pickle_exits_2_and_writes_nothing(case):
    from typer.testing import CliRunner

    from emulator.cli import app
    data, how, words = case
    event(f"pickle: {how}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "cap.pkl").write_bytes(data)
        res = CliRunner().invoke(app, ["traces", "import-fedscale", "--capacity", str(tmp / "cap.pkl"),
                                       "--out", str(tmp / "traces")])
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and str(tmp / "cap.pkl") in lines[0] and words in lines[0], lines
        assert sorted(p.name for p in tmp.iterdir()) == ["cap.pkl"]
