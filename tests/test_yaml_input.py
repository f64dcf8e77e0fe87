"""Hostile YAML: bytes that are not UTF-8, `[` nested 100 000 deep, an alias bomb under an
unknown key, a key given twice (docs/bad-input.md). Each: exit status 2, no traceback, the
file named with the line, nothing written."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from emulator.scenario import schema as scenario, yaml_input
from emulator.cli import app
from emulator.errors import ScenarioError

from conftest import tiny

BOMB = """
junk: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def base_text(**over) -> str:
    return yaml.safe_dump(tiny(**{"run.rounds": 1, **over}), sort_keys=False)


def line_of(text: str, start: str, nth: int = 0) -> int:
    """1-based number of the nth line of `text` that starts (stripped) with `start`."""
    return [i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip().startswith(start)][nth]


def hostile_files() -> dict:
    good = base_text()
    dup = good.replace("  lr: 0.1\n", "  lr: 0.1\n  lr: 50\n")
    bomb = good + BOMB
    return {
        "latin1": (good.replace("name: tiny", "name: tiny\ndescription: caf\u00e9").encode("latin-1"),
                   ["not UTF-8", "byte 0xe9", "line 2"]),
        "deep_list": (good.encode() + b"extra: " + b"[" * 100_000, ["nested more than", "line"]),
        "deep_map": (good.encode() + b"extra: " + b"{a: " * 100_000, ["nested more than"]),
        "deep_block": (good.encode() + b"".join(b" " * i + b"k:\n" for i in range(200)), ["nested more than"]),
        # g is the first list past 10^6 values (9^7 + ...), under the unknown key `g`
        "bomb_unknown_key": (bomb.encode(), ["aliases expand to more than", f"line {line_of(bomb, 'g: &g')}"]),
        "bomb_in_description": ((good + BOMB.replace("i: &i", "description: &i")).encode(),
                                ["aliases expand to more than"]),
        "duplicate_key": (dup.encode(), ["algorithm.lr", "given twice",
                                         f"line {line_of(dup, 'lr: 0.1')} and line {line_of(dup, 'lr: 50')}"]),
        "duplicate_top": ((good + "seed: 4\n").encode(), ["seed", "given twice", "line 2 and line"]),
    }


@pytest.mark.parametrize("case", list(hostile_files()))
@pytest.mark.parametrize("command", ["validate", "run"])
def test_hostile_yaml_is_one_clear_error(tmp_path, monkeypatch, case, command):
    monkeypatch.chdir(tmp_path)
    data, expect = hostile_files()[case]
    f = tmp_path / "s.yaml"
    f.write_bytes(data)
    r = CliRunner().invoke(app, [command, str(f), *(["-q"] if command == "run" else [])])
    text = r.output + r.stderr
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.exception, text)
    assert "Traceback" not in text and str(f) in text
    for e in expect:
        assert e in text, (e, text)
    assert sorted(os.listdir(tmp_path)) == ["s.yaml"]                 # nothing written


def test_set_overrides_are_read_with_the_same_bounds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(base_text())
    r = CliRunner().invoke(app, ["validate", "s.yaml", "--set", "description=" + "[" * 10_000])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert "--set description" in r.output + r.stderr and "nested more than" in r.output + r.stderr


@pytest.mark.slow
def test_what_yaml_allows_still_loads():
    # anchors, aliases and merge keys within the bounds; a 10^5-value list; a BOM
    text = base_text().replace("name: tiny", "name: tiny\nx-defaults: &d {latency: 0.01}")
    raw = yaml_input.parse("\ufeff" + text)
    assert raw["name"] == "tiny" and raw["x-defaults"] == {"latency": 0.01}
    merged = yaml_input.parse("a: &a {x: 1, y: 2}\nb: {<<: *a, y: 3}\n")
    assert merged["b"] == {"x": 1, "y": 3}
    big = yaml_input.parse("v: [" + ", ".join("1" for _ in range(100_000)) + "]\n")
    assert len(big["v"]) == 100_000
    shared = yaml_input.parse("a: &a [" + ", ".join("0" for _ in range(1000)) + "]\n"
                              + "b: [" + ", ".join("*a" for _ in range(900)) + "]\n")
    assert len(shared["b"]) == 900                   # 901 000 values: under the bound
    assert yaml_input.parse(b"k: caf\xc3\xa9\n") == {"k": "caf\u00e9"}


def test_bounds_are_exact():
    deep = lambda n: "v: " + "[" * n + "]" * n                      # noqa: E731
    assert yaml_input.parse(deep(yaml_input.MAX_DEPTH - 1))          # the mapping is one level
    with pytest.raises(yaml_input.YamlInputError, match="nested more than"):
        yaml_input.parse(deep(yaml_input.MAX_DEPTH + 1))
    n = yaml_input.MAX_NODES
    # a list of k aliases to a list of m scalars is 1 + k * (1 + m) values
    ok = "a: &a [" + ", ".join("0" for _ in range(999)) + "]\nb: [" + ", ".join("*a" for _ in range(998)) + "]\n"
    size = lambda k: 1 + 2 + 1000 + 1 + k * 1000          # noqa: E731  the root, its keys, a, b of k aliases
    assert size(998) <= n < size(999) and yaml_input.parse(ok)
    bad = ok.replace("b: [", "b: [*a, ")                                      # 999 aliases
    with pytest.raises(yaml_input.YamlInputError, match="aliases expand"):
        yaml_input.parse(bad)


def test_scenario_text_source_and_sweep_file_use_the_same_reader(tmp_path):
    with pytest.raises(ScenarioError, match="given twice"):
        scenario.load(base_text() + "seed: 1\n")
    from emulator import sweep as sw
    f = tmp_path / "sweep.yaml"
    f.write_text("name: a\nbase: s.yaml\nseeds: 1\nseeds: 2\n")
    with pytest.raises(ScenarioError, match=r"seeds: key 'seeds' is given twice: line 3 and line 4"):
        sw.load_spec(f)


def test_text_that_is_not_yaml_names_its_line_and_column():
    """A scanner error carries its mark: the problem is located at the line and column of the
    file where YAML gave up (the second `:` of `{rounds: a: b}`, line 3, column 16)."""
    text = "name: x\nseed: 0\nrun: {rounds: a: b}\n"
    with pytest.raises(ScenarioError) as e:
        yaml_input.parse_or_explain(text, source="s.yaml")
    assert e.value.problems == [("", "not valid YAML (line 3, column 16): expected ',' or '}', but got ':'")]
