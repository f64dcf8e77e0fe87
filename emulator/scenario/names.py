"""Run and sweep names: plain names, so that a name never names a path of its own
(docs/bad-input.md)."""
from __future__ import annotations

import re

NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
NAME_RULE = ("a plain name of 1-128 letters, digits and _ . - that does not start with "
             "'.' or '-' (no '/', no spaces)")


def check_name(v):
    """A run or sweep name: `NAME_RULE`, so that it never names a path of its own."""
    if not isinstance(v, str) or not NAME_RE.fullmatch(v):
        raise ValueError(f"must be {NAME_RULE}")
    return v
