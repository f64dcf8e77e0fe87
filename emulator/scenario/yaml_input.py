"""Reading YAML that users (or anyone) typed: `safe_load` with bounds (docs/bad-input.md).

`parse(text)` is `yaml.safe_load` that turns every way a document can hurt into one
`YamlInputError` with its line: bytes that are not UTF-8, nesting deeper than `MAX_DEPTH`
(`[` 100 000 times would end in a RecursionError), aliases that expand to more than
`MAX_NODES` values (the "billion laughs" bomb: a few lines that become 10^9 values), and a
key given twice in one mapping (PyYAML keeps the last one silently).
"""
from __future__ import annotations

from pathlib import Path

import yaml
from yaml.nodes import MappingNode, ScalarNode

from ..errors import ScenarioError

MAX_DEPTH = 64            # a scenario nests about 6 deep
MAX_NODES = 1_000_000     # values after aliases are expanded (a 10^6-client list still fits)


class YamlInputError(ValueError):
    """Text that is not a YAML document flemu will read; `line` is 1-based (None if unknown)."""

    def __init__(self, message: str, line=None, path: str = ""):
        self.line, self.path = line, path
        super().__init__(message)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer counts its depth (it recurses once per nesting level)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass):
        if self.flow_level >= MAX_DEPTH:           # stop `[[[[...` before scanning it all
            raise YamlInputError(f"nested more than {MAX_DEPTH} levels deep (line {self.line + 1})", self.line + 1)
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YamlInputError(f"nested more than {MAX_DEPTH} levels deep (line {mark.line + 1})",
                                     mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def decode(data: bytes) -> str:
    """UTF-8 text (a leading BOM is dropped), or `YamlInputError` naming the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise YamlInputError(f"not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, column {col} "
                             f"(save the file as UTF-8)", line) from None


def _line(node) -> int:
    return node.start_mark.line + 1


def _check(root) -> None:
    """Duplicate keys (both lines named) and the expanded size, over the node graph (each
    node once: an alias is the same node object as its anchor)."""
    size: dict = {}
    stack = [(root, False, "")]
    while stack:
        node, done, path = stack.pop()
        key = id(node)
        if key in size and not done:
            continue
        if isinstance(node, ScalarNode):
            size[key] = 1
            continue
        if isinstance(node, MappingNode):
            children = [(c, _join(path, k)) for k, v in node.value for c in (k, v)]
        else:
            children = [(c, f"{path}[{i}]") for i, c in enumerate(node.value)]
        if not done:
            size[key] = None                      # on the stack (a recursive alias: counted below)
            if isinstance(node, MappingNode):
                _duplicates(node, path)
            stack.append((node, True, path))
            stack.extend((c, False, p) for c, p in children if id(c) not in size)
            continue
        total = 1
        for c, _ in children:
            s = size.get(id(c))
            if s is None:                          # a node that contains itself
                raise YamlInputError(f"a recursive alias (line {_line(c)}): a value may not contain itself",
                                     _line(c))
            total += s
        if total > MAX_NODES:
            raise YamlInputError(f"aliases expand to more than {MAX_NODES:,} values (the mapping or list at "
                                 f"line {_line(node)}); write the values out, or use fewer aliases",
                                 _line(node))
        size[key] = total


def _join(path: str, k) -> str:
    name = k.value[:60] if isinstance(k, ScalarNode) else "?"
    return f"{path}.{name}" if path else name


def _duplicates(node: MappingNode, path: str) -> None:
    seen = {}
    for k, _ in node.value:
        if not isinstance(k, ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
            continue
        ident = (k.tag, k.value)
        if ident in seen:
            raise YamlInputError(f"key {k.value[:60]!r} is given twice: line {seen[ident]} and line {_line(k)} "
                                 f"(YAML keeps only one; delete the other)", _line(k), _join(path, k))
        seen[ident] = _line(k)


def parse(text):
    """The document in `text` (str or bytes) as plain data; `YamlInputError` for what the
    module docstring lists, `yaml.YAMLError` for text that is not YAML."""
    if isinstance(text, (bytes, bytearray)):
        text = decode(bytes(text))
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


# --------------------------------------------------------------------------- scenario and sweep files
MAX_FILE_BYTES = 64 << 20      # a scenario or sweep file larger than this is not one


def parse_or_explain(text, source=None):
    """`yaml_input.parse` (bounded safe_load: UTF-8, depth, alias expansion, duplicate
    keys) with every problem as a ScenarioError naming the line."""
    try:
        return parse(text)
    except YamlInputError as e:
        raise ScenarioError([(e.path, str(e))], source=source) from None
    except yaml.YAMLError as e:
        marked = isinstance(e, yaml.MarkedYAMLError)
        mark = e.problem_mark if marked else None
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ScenarioError([("", f"not valid YAML{where}: {(e.problem if marked else None) or e}")],
                            source=source) from None


def read_mapping(path) -> dict:
    """A scenario or sweep file: a YAML mapping, or a ScenarioError naming the file."""
    p = Path(path)
    if not p.exists():
        raise ScenarioError([("", f"scenario file not found: {path}")], source=str(path))
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ScenarioError([("", f"cannot read the file: {e.strerror or e}")], source=str(path)) from None
    if len(data) > MAX_FILE_BYTES:
        raise ScenarioError([("", f"larger than {MAX_FILE_BYTES >> 20} MiB; not a scenario file")], source=str(path))
    raw = parse_or_explain(data, str(path))
    if raw is None:
        raise ScenarioError([("", "the file is empty; a scenario is a YAML mapping (name, workload, clients, "
                                  "protocol, algorithm, run)")], source=str(path))
    if not isinstance(raw, dict):
        raise ScenarioError([("", f"a scenario is a YAML mapping, got {type(raw).__name__}")], source=str(path))
    return raw
