"""Open the built docs site and one report in a real headless Chromium (`make docs-check`).

For each page: a screenshot at 1280 x 900 (PNG under --out) and the page's layout width as
the browser measured it (the page's scroll width, or the right edge of its widest table if
that is further; read back from the DOM after the page's scripts ran). A page wider than the window is a failure (exit 1): the report's
"every run" table must fit a 1280-pixel window. The report comes from two short runs of the
quickstart (waiting for every client, and with a deadline), reported together.

    python docs/tools/browser_check.py --out site-check [--site site] [--chromium chromium]

Chromium comes from the distribution (Debian: `apt-get install chromium`); it runs with
--headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking
--disable-component-update --disable-sync and a throw-away profile.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["index.html", "getting-started.html", "concepts.html", "reference.html", "tsfl.html",
         "algorithms/fedsum.html", "api.html"]
WIDTH, HEIGHT = 1280, 900
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}",
         "--virtual-time-budget=4000"]
# the page's width, or the right edge of its widest table if that is further (a table in a
# horizontally scrolling box does not widen the page, but a reader still has to scroll it)
PROBE = ("<script>window.addEventListener('load',function(){var w=document.documentElement.scrollWidth;"
         "document.querySelectorAll('table').forEach(function(t){var r=t.getBoundingClientRect();"
         "w=Math.max(w,Math.ceil(r.left+t.scrollWidth));});"
         "document.body.setAttribute('data-scroll-width',String(w));});</script>")


def chromium(binary: str, profile: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120)


def measure(binary: str, profile: Path, page: Path) -> int:
    """The layout width Chromium gives the page in a 1280-pixel window."""
    probe = page.with_name(f"_probe_{page.name}")
    text = page.read_text()
    probe.write_text(text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE)
    try:
        dom = chromium(binary, profile, "--dump-dom", probe.as_uri()).stdout
    finally:
        probe.unlink()
    m = re.search(r'data-scroll-width="(\d+)"', dom)
    return int(m.group(1)) if m else -1


def make_report(workdir: Path) -> Path:
    flemu = str(Path(sys.executable).with_name("flemu"))
    base = ["run", str(ROOT / "scenarios/quickstart.yaml"), "--set", "run.rounds=4", "-q"]
    subprocess.run([flemu, *base, "--out", str(workdir / "wait_all")], check=True)
    subprocess.run([flemu, *base, "--set", "protocol.wait={mode: deadline, seconds: 2.0}",
                    "--out", str(workdir / "deadline_2s")], check=True)
    out = workdir / "report.html"
    subprocess.run([flemu, "report", str(workdir / "wait_all"), str(workdir / "deadline_2s"), "--out", str(out)],
                   check=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="site-check", type=Path)
    ap.add_argument("--site", default="site", type=Path)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    a = ap.parse_args(argv)
    if not shutil.which(a.chromium) and not Path(a.chromium).exists():
        print("chromium not found: apt-get install chromium (Debian) or give --chromium PATH", file=sys.stderr)
        return 2
    if not (a.site / "index.html").exists():
        print(f"{a.site}/index.html missing: run `make docs` first", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    targets = [(p.replace(".html", ""), a.site / p) for p in PAGES]
    targets.append(("report", make_report(a.out / "runs")))
    bad = 0
    with tempfile.TemporaryDirectory(prefix="flemu-chromium-") as profile:
        for name, page in targets:
            shot = a.out / f"{name.replace('/', '_')}.png"
            chromium(a.chromium, Path(profile), f"--screenshot={shot.resolve()}", page.resolve().as_uri())
            if name == "report":                     # the whole report, down to its every-run table
                chromium(a.chromium, Path(profile), f"--window-size={WIDTH},6000",
                         f"--screenshot={(a.out / 'report_full.png').resolve()}", page.resolve().as_uri())
            width = measure(a.chromium, Path(profile), page.resolve())
            ok = 0 < width <= WIDTH and shot.exists()
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} {name:28s} layout width {width:5d} px (window {WIDTH})  {shot}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
