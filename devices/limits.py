"""The documented range of every number a time model takes, and why.

Virtual time is a float64 number of seconds. Its spacing grows with its size (about 1.2e-7 s
at 1e9 s), so a duration much shorter than that spacing is lost when it is added to the clock
(a 10 ms latency vanishes at t ~ 1e14 s), and a duration near the float limit turns into inf.
Byte counters are int64 (at most 2^63 - 1 ~ 9.2e18 bytes over a run). Hence:

- every duration (step times, latencies, jitter, periods, slots, mean on/off times) is finite
  and at most MAX_SECONDS = 1e9 s (about 32 years); a positive one is at least MIN_SECONDS =
  1e-6 s: the 1e-6 s of the shortest duration still count at the end of the longest run
  (run.virtual_time at most MAX_SECONDS, where the spacing is 1.2e-7 s);
- every bandwidth is within [MIN_MBPS, MAX_MBPS] = [1e-3, 1e9] Mbit/s (1 kbit/s to 1 Pbit/s):
  a message of a GiB then takes at most ~8.6e6 s;
- bytes per parameter at most MAX_BYTES_PER_PARAM = 16, overhead per message at most
  MAX_OVERHEAD_BYTES = 2^30 (1 GiB): millions of messages of the largest model stay far
  below the int64 limit;
- log-space spreads (lognormal sigma, jitter sigma, bandwidth spread) at most MAX_SIGMA = 5:
  beyond it a 1-in-a-million draw is e^30 times the mean, i.e. the run stalls on one draw.

Trace files are held to the same ranges, row by row (`check_row_value`).
"""
from __future__ import annotations

import math

MIN_SECONDS = 1e-6
MAX_SECONDS = 1e9
MIN_MBPS = 1e-3
MAX_MBPS = 1e9
MAX_BYTES_PER_PARAM = 16
MAX_OVERHEAD_BYTES = 2 ** 30
MAX_SIGMA = 5.0
MAX_SPEED = 1.0 / MIN_SECONDS      # steps per second
MIN_SPEED = 1.0 / MAX_SECONDS

SECONDS = f"a finite number of seconds in [{MIN_SECONDS:g}, {MAX_SECONDS:g}]"
MBPS = f"a finite number of Mbit/s in [{MIN_MBPS:g}, {MAX_MBPS:g}]"

#: what a trace column may hold: (lowest, highest, text for the message)
COLUMN_RANGES = {
    "step_time": (MIN_SECONDS, MAX_SECONDS, SECONDS),
    "sample_time": (MIN_SECONDS, MAX_SECONDS, SECONDS),
    "speed": (MIN_SPEED, MAX_SPEED, f"a finite number of steps per second in [{MIN_SPEED:g}, {MAX_SPEED:g}]"),
    "up_mbps": (MIN_MBPS, MAX_MBPS, MBPS),
    "down_mbps": (MIN_MBPS, MAX_MBPS, MBPS),
    "start": (0.0, MAX_SECONDS, f"a finite time in [0, {MAX_SECONDS:g}] seconds"),
    "end": (0.0, MAX_SECONDS, f"a finite time in [0, {MAX_SECONDS:g}] seconds"),
    "period": (MIN_SECONDS, MAX_SECONDS, SECONDS),
}


class TraceError(ValueError):
    """A trace file breaks its format: the message names the file and the row."""


def where(row: int) -> str:
    """Data row `row` (1-based) of a CSV with one header line."""
    return f"row {row} (line {row + 1})"


def number(path, row: int, column: str, text) -> float:
    """The float in `column` of data row `row` (1-based, the header is row 0) of `path`,
    within COLUMN_RANGES[column]; else a TraceError naming the file, row and what is allowed."""
    lo, hi, allowed = COLUMN_RANGES[column]
    if text is None or str(text).strip() == "":
        raise TraceError(f"{path} {where(row)}: no {column} value (a short row?); {column} is {allowed}")
    try:
        v = float(text)
    except ValueError:
        raise TraceError(f"{path} {where(row)}: {column} {text!r} is not a number; {column} is {allowed}") from None
    if not (math.isfinite(v) and lo <= v <= hi):
        raise TraceError(f"{path} {where(row)}: {column} {str(text).strip()} is out of range; {column} is {allowed}")
    return v


def require_columns(path, fieldnames, needed, optional_one_of=()) -> None:
    """Refuse a CSV without the columns `needed` (and, if given, one of `optional_one_of`)."""
    cols = set(fieldnames or ())
    missing = [c for c in needed if c not in cols]
    if missing or (optional_one_of and not cols & set(optional_one_of)):
        need = ", ".join(needed) + (f" and one of {', '.join(optional_one_of)}" if optional_one_of else "")
        got = ", ".join(fieldnames) if fieldnames else "no header"
        raise TraceError(f"{path}: needs columns {need}; found {got}")


def rows(path, reader):
    """(row number, row) of a csv.DictReader, refusing short rows and files with no data row."""
    n = 0
    for n, line in enumerate(reader, start=1):
        if None in line.values() or None in line:
            raise TraceError(f"{path} {where(n)}: {len(reader.fieldnames)} columns expected "
                             f"({', '.join(reader.fieldnames)}); the row has "
                             f"{sum(v is not None for v in line.values()) + len(line.get(None) or ())}")
        yield n, line
    if n == 0:
        raise TraceError(f"{path}: no data rows (only a header, or an empty file)")
