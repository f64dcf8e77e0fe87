"""A pymarkdown rule for what Python-Markdown (the renderer of this site) reads differently.

pymarkdown checks CommonMark, where the content of a list item `- item` starts at column 2.
Python-Markdown, which MkDocs uses, wants 4 spaces for anything inside a list item after a
blank line (a second paragraph, a table, a fenced block, a nested list): with 2 spaces the
list ends there, the table or paragraph falls out of it, and the items after it are read as
plain text of a run-on paragraph. This rule (FLM001, `python-markdown-list-indent`) flags:

- a nested list marker whose indentation is not a multiple of 4;
- a line after a blank line inside a list item indented by 1-3 spaces (or, one level deeper,
  by anything that is not a multiple of 4);
- a list item right after an indented paragraph or table of the item before it, with no blank
  line between: Python-Markdown reads the whole indented block as that item's content, so the
  new item's marker and text are glued to the paragraph.

Loaded by `docs/tools/lint_docs.py` with pymarkdown's `--add-plugin`; the rest of the rule
set (blank lines around lists, tables, fences and headings, nested list indentation) is
pymarkdown's own, configured in `[tool.pymarkdown]` of pyproject.toml.
"""
from __future__ import annotations

import re

from pymarkdown.plugin_manager.plugin_details import PluginDetailsV2
from pymarkdown.plugin_manager.plugin_scan_context import PluginScanContext
from pymarkdown.plugin_manager.rule_plugin import RulePlugin

MARKER = re.compile(r"^( *)(?:[-*+]|\d+[.)])(?: +|$)")
FENCE = re.compile(r"^ *(```|~~~)")


class MdPythonLists(RulePlugin):
    """Content inside a list item must be indented by multiples of 4 spaces."""

    def __init__(self) -> None:
        super().__init__()
        self.in_list = False
        self.after_blank = False
        self.fence: str | None = None
        self.block: int | None = None     # indentation of the item content block we are in

    def get_details(self) -> PluginDetailsV2:
        return PluginDetailsV2(
            plugin_name="python-markdown-list-indent",
            plugin_id="FLM001",
            plugin_enabled_by_default=True,
            plugin_description="Python-Markdown needs 4 spaces per level inside a list item",
            plugin_version="0.1.0",
            plugin_url="https://python-markdown.github.io/#differences",
            plugin_supports_fix=False,
        )

    def starting_new_file(self) -> None:
        self.in_list, self.after_blank, self.fence, self.block = False, False, None, None

    def next_line(self, context: PluginScanContext, line: str) -> None:
        if self.fence is not None:                     # inside a fenced block: only its end counts
            m = FENCE.match(line)
            if m and m.group(1) == self.fence and line.strip() == self.fence:
                self.fence = None
            return
        if not line.strip():
            self.after_blank, self.block = True, None
            return
        indent = len(line) - len(line.lstrip(" "))
        marker = MARKER.match(line)
        if marker:
            if indent % 4:
                self.report_next_line_error(context, indent + 1, extra_error_information=(
                    f"a list marker indented by {indent} spaces: use a multiple of 4"))
            if self.block is not None and indent < self.block:
                self.report_next_line_error(context, indent + 1, extra_error_information=(
                    "a list item right after an indented block of the item before: put a blank line before it"))
            self.in_list, self.block = True, None
        elif self.in_list and self.after_blank:
            self.block = indent if indent else None
            if indent == 0:
                self.in_list = False                   # the list ended before this line
            elif indent % 4:
                self.report_next_line_error(context, indent + 1, extra_error_information=(
                    f"content of a list item indented by {indent} spaces after a blank line: use 4"))
        if line.lstrip().startswith("#") and indent == 0:
            self.in_list = False
        m = FENCE.match(line)
        if m:
            self.fence = m.group(1)
        self.after_blank = False
