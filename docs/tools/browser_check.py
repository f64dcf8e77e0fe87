"""Open every page of the built docs site and one report in a real headless Chromium (`make docs-check`).

For each page: a screenshot at 1280 x 900 (PNG under --out) and, read back from the DOM after
the page's scripts ran (KaTeX included), two measures:

- the page's layout width (its scroll width, or the right edge of its widest table if that is
  further): wider than the window fails;
- the text column's overflow: every element inside the column (Material's
  `.md-content__inner`; the body for the report) whose content is wider than its box (a code
  line, a table or a formula hidden behind a horizontal scroll bar) or that reaches past the
  column's right edge. Any such element fails the page, and is named in the output.

The report comes from two short runs of the quickstart (waiting for every client, and with a
deadline), reported together; it is checked for its width only (its wide tables scroll by design).

    python docs/tools/browser_check.py --out site-check [--site site] [--chromium chromium]
                                       [--pages a.html b.html] [--no-report]

Chromium comes from the distribution (Debian: `apt-get install chromium`); it runs with
--headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking
--disable-component-update --disable-sync and a throw-away profile. Exit 0 when every page
fits, 1 when one does not, 2 when Chromium or the site is missing.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 1280, 900
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}",
         "--virtual-time-budget=4000"]
# after the page's own scripts: the page's width (or its widest table's right edge), and the
# elements of the text column that overflow it or their own box (1 px of rounding allowed)
PROBE = """<script>window.addEventListener('load',function(){setTimeout(function(){
var w=document.documentElement.scrollWidth;
document.querySelectorAll('table').forEach(function(t){var r=t.getBoundingClientRect();
  w=Math.max(w,Math.ceil(r.left+t.scrollWidth));});
var col=document.querySelector('.md-content__inner'), bad=[];
if(col){var right=col.getBoundingClientRect().right;
  col.querySelectorAll('*').forEach(function(e){
    if(e.closest('.katex-mathml'))return;   /* KaTeX's MathML copy: for screen readers, never shown */
    var k=e.closest('.katex'); if(k&&k!==e)return;   /* a formula is measured as a whole */
    if(e.closest('.md-typeset__scrollwrap')&&e.tagName!=='TABLE')return;
    var r=e.getBoundingClientRect(); if(r.width===0)return;
    var hidden=e.scrollWidth>e.clientWidth+1&&getComputedStyle(e).overflowX!=='visible'&&e.clientWidth>0;
    /* inline content at a line's end (a code span's padding, a formula's subscript) may poke out a few px */
    var slack=getComputedStyle(e).display.indexOf('inline')===0?8:1;
    if(hidden||r.right>right+slack){bad.push(e.tagName.toLowerCase()+(e.className?'.'+String(e.className).split(' ')[0]:'')
      +': '+(hidden?'content '+e.scrollWidth+' px in a '+e.clientWidth+' px box':'right edge '+Math.round(r.right)
      +' px past the column ('+Math.round(right)+' px)')+' \u2014 '+(e.textContent||'').trim().slice(0,60));}
  });}
document.body.setAttribute('data-check',JSON.stringify({width:w,column:!!col,overflow:bad.slice(0,20)}));
},0);});</script>"""


def chromium(binary: str, profile: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120)


def measure(binary: str, profile: Path, page: Path) -> dict:
    """{width, column, overflow}: what Chromium lays out for the page in a 1280-pixel window."""
    probe = page.with_name(f"_probe_{page.name}")
    text = page.read_text()
    probe.write_text(text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE)
    try:
        dom = chromium(binary, profile, "--dump-dom", probe.as_uri()).stdout
    finally:
        probe.unlink()
    m = re.search(r'data-check="([^"]*)"', dom)
    if not m:
        return {"width": -1, "column": False, "overflow": ["the probe did not run"]}
    import html
    return json.loads(html.unescape(m.group(1)))


def site_pages(site: Path) -> list:
    """Every page of the built site (the 404 page and the search index aside)."""
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.html")
                  if p.name != "404.html" and not p.name.startswith("_probe_")
                  and not str(p.relative_to(site)).startswith(("assets/", "search/")))


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


def check(binary: str, profile: Path, name: str, page: Path, out: Path) -> bool:
    shot = out / f"{name.replace('/', '_').removesuffix('.html')}.png"
    chromium(binary, profile, f"--screenshot={shot.resolve()}", page.resolve().as_uri())
    if name == "report":                     # the whole report, down to its every-run table
        chromium(binary, profile, f"--window-size={WIDTH},6000",
                 f"--screenshot={(out / 'report_full.png').resolve()}", page.resolve().as_uri())
    m = measure(binary, profile, page.resolve())
    overflow = m["overflow"] if m["column"] else []
    ok = 0 < m["width"] <= WIDTH and shot.exists() and not overflow
    print(f"{'ok ' if ok else 'BAD'} {name:34s} layout width {m['width']:5d} px (window {WIDTH}), "
          f"{len(overflow)} overflowing in the text column  {shot}")
    for line in overflow:
        print(f"      {line}")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="site-check", type=Path)
    ap.add_argument("--site", default="site", type=Path)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--pages", nargs="*", help="pages of the site to check (default: every page)")
    ap.add_argument("--no-report", action="store_true", help="skip the report (no runs)")
    a = ap.parse_args(argv)
    if not shutil.which(a.chromium) and not Path(a.chromium).exists():
        print("chromium not found: apt-get install chromium (Debian) or give --chromium PATH", file=sys.stderr)
        return 2
    if not (a.site / "index.html").exists():
        print(f"{a.site}/index.html missing: run `make docs` first", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    targets = [(p, a.site / p) for p in (a.pages or site_pages(a.site))]
    if not a.no_report:
        targets.append(("report", make_report(a.out / "runs")))
    bad = 0
    with tempfile.TemporaryDirectory(prefix="flemu-chromium-") as profile:
        for name, page in targets:
            bad += not check(a.chromium, Path(profile), name, page, a.out)
    print(f"{len(targets) - bad} of {len(targets)} pages fit a {WIDTH}-pixel window")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
