"""The sweep file (emulator/sweep/spec.py, axes.py): every problem of a sweep is reported
together at its path, and the command line's additions join the file's. No run starts."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import quadratic_scenario
from emulator.runs import outputs
from emulator.errors import ScenarioError
from emulator.sweep import load_spec


def problems(spec: dict, **kw) -> list:
    with pytest.raises(ScenarioError) as e:
        load_spec(spec, **kw)
    return e.value.problems


def test_every_problem_of_a_sweep_is_reported_at_its_path():
    got = problems({"name": "bad name!", "base": quadratic_scenario(rounds=2), "colour": 1,
                    "set": ["no_equals_sign"], "variants": {"a": {}, "b c": {}},
                    "grid": {"algorithm.lr": [], "seed": [1, 2]}, "seeds": [1, 1], "backend": "slurm",
                    "report": [1]})
    assert got == [
        ("colour", "unknown key in a sweep; allowed: address, backend, base, description, grid, name, out, "
                   "plugins, report, resources, seeds, set, threads, variants, workers"),
        ("name", f"a sweep name must be {outputs.NAME_RULE} (got 'bad name!')"),
        ("set[0]", "overrides look like path=value, e.g. algorithm.lr=0.1"),
        ("variants.b c", "a variant name of letters, digits, _ . + -"),
        ("grid.algorithm.lr", "no values"),
        ("grid", "`seed` and `run` are reserved column names; use `seeds:` for seeds"),
        ("seeds", "seeds must be distinct integers >= 0, got [1, 1]"),
        ("backend", "one of local, ray, got 'slurm'"),
        ("report", "a mapping (hue, col, x, target, budget)"),
    ]


@pytest.mark.parametrize("spec,expected", [
    ({"base": None}, [("base", "a sweep needs `base:` (a scenario file or mapping)")]),
    ({"base": 3}, [("base: base", "a scenario file path or mapping, got int")]),
    ({"base": {**quadratic_scenario(), "seed": -1}}, None),
    ({"seeds": 0}, [("seeds", "a number of seeds (>= 1) or a list of seeds, got 0")]),
    ({"variants": []}, [("variants", "no variants given")]),
    ({"variants": [{"name": "a"}, {"name": "a"}]}, [("variants", "variant names must be distinct")]),
    ({"variants": [{"set": {}}]}, [("variants[0]", "a mapping with a `name` (and `set:` overrides)"),
                                   ("variants", "no variants given")]),
    ({"grid": [1]}, [("grid", "a mapping of `path: [values]` or `axis: {label: overrides}`, got [1]")]),
    ({"grid": {"x": {"a": 1}}}, [("grid.x.a", "an override set `{path: value}`, got 1")]),
    ({"grid": {"x": 3}}, [("grid.x", "a list of values, or a mapping label -> {path: value}; got 3")]),
    ({"set": 3}, [("set", "a mapping `path: value` (or a list of `path=value`), got 3")]),
])
def test_one_problem_each(spec, expected):
    spec = {"name": "sw", "base": quadratic_scenario(rounds=2), **spec}
    if spec["base"] is None:
        del spec["base"]
    got = problems(spec)
    if expected is None:                       # the base's own problems, located under base:
        assert [p for p, _ in got] == ["base: seed"]
    else:
        assert got == expected


def test_the_command_line_joins_the_file(tmp_path):
    base = tmp_path / "s.yaml"
    base.write_text(yaml.safe_dump(quadratic_scenario(rounds=2)))
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump({"name": "file_name", "base": "s.yaml", "set": {"run.rounds": 3},
                                 "grid": {"algorithm.lr": [0.1, 0.2]}}))
    spec = load_spec(f, grid=["protocol.local_steps=[1, 2, 3]"], sets=["algorithm.lr=0.3", ("seed", 4)],
                     seeds=2, variants={"x": {"run.rounds": 1}, "y": None}, name="cli_name", out=tmp_path / "o")
    assert spec.name == "cli_name" and spec.out == tmp_path / "o" and spec.seeds == [0, 1]
    assert spec.base_dir == tmp_path and spec.base["run"]["rounds"] == 2
    assert spec.set == [("run.rounds", 3), ("algorithm.lr", 0.3), ("seed", 4)]
    assert [(a.name, a.key, a.labels) for a in spec.axes] == [
        ("variant", "variant", ["x", "y"]), ("algorithm.lr", "lr", [0.1, 0.2]),
        ("protocol.local_steps", "local_steps", [1, 2, 3])]
    assert spec.axes[0].sets == [[("run.rounds", 1)], []]
    assert spec.axes[2].sets == [[("protocol.local_steps", v)] for v in (1, 2, 3)]
    assert list(spec.raw) == ["base", "grid", "name", "set", "seeds", "variants", "out"]
    # a scenario file is a sweep of its own base
    one = load_spec(base, seeds=[5, 7])
    assert one.name == "quad" and one.seeds == [5, 7] and one.axes == [] and Path(one.raw["base"]["name"]) == Path("quad")


def test_dry_run_lists_the_planned_runs_and_writes_nothing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from emulator.cli import app
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text(yaml.safe_dump(quadratic_scenario(rounds=2)))
    r = CliRunner().invoke(app, ["sweep", "s.yaml", "--grid", "algorithm.lr=[0.1, 0.2]", "--seeds", "2",
                                 "--dry-run", "--out", "sw"])
    assert r.exit_code == 0, r.output
    assert "sweep quad: 4 runs in sw" in r.output
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in r.output.splitlines() if line.startswith("│")]
    assert rows == [[f"lr={lr}__seed={s}", str(lr), str(s), "pending"] for lr in (0.1, 0.2) for s in (0, 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
