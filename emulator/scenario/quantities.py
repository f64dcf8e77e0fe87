"""Typed quantities of device parameters: finite floats, durations and bandwidths within
the ranges of devices/limits.py (which says why each bound is there), and trace-file fields
read at validation time, so that a broken row is reported with every other problem of the
scenario, naming the file and the row."""
from __future__ import annotations

import csv
import os
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, ValidationInfo

from devices import limits as L

from ..registry import Params


class FiniteParams(Params):
    """Parameters whose every float is finite (devices/limits.py gives each range and why)."""

    model_config = ConfigDict(allow_inf_nan=False)


def _resolved(v: float) -> float:
    if 0 < v < L.MIN_SECONDS:
        raise ValueError(f"a duration is 0 or at least {L.MIN_SECONDS:g} s: shorter ones are lost to "
                         "float rounding in virtual time")
    return v


#: a duration that may be 0: 0, or within [MIN_SECONDS, MAX_SECONDS]
MaybeSeconds = Annotated[float, AfterValidator(_resolved)]


def seconds(default=..., *, zero=False, description: str):
    """A duration field: finite, at most MAX_SECONDS, and (unless `zero`) at least MIN_SECONDS."""
    return Field(default, ge=0 if zero else L.MIN_SECONDS, le=L.MAX_SECONDS, description=description)


def bandwidth(default=..., *, description: str):
    return Field(default, ge=L.MIN_MBPS, le=L.MAX_MBPS, description=description)


def resolve_file(v: str, info: ValidationInfo, kind: str = "trace") -> str:
    """A file field's path, absolute (found as a data file's: emulator/workloads/datasets.py),
    noted as an input file of the run: config.yaml records it with its hash for replays."""
    from ..workloads.datasets import _resolve_file
    return _resolve_file(v, info, kind)


def trace_file(reader):
    """A validator of a trace-file field: the file resolved (as `resolve_file`) and read with
    `reader` now, so a broken row is reported with every other problem of the scenario
    (naming the file and row); the table is kept for the factory (`table`)."""
    def check(v: str, info: ValidationInfo) -> str:
        path = resolve_file(v, info)
        table(reader, path)
        return path
    return check


TABLES: dict = {}


def table(reader, path):
    """`reader(path)`, read once per file version (path, size, mtime)."""
    st = os.stat(path)
    key = (reader, path, st.st_size, st.st_mtime_ns)
    if key not in TABLES:
        try:
            TABLES[key] = reader(path)
        except (UnicodeDecodeError, OSError, csv.Error) as e:
            raise ValueError(f"{path}: cannot read as a CSV file ({e})") from None
    return TABLES[key]
