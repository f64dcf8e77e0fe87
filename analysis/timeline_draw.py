"""The timeline drawn (`flemu timeline`; analysis/timeline.py reads it): a Gantt chart of
every client over virtual time, one row per client grouped by device group, coloured by
kind (download, compute, upload, late / cut, offline, idle), with each round's deadline
(dashed) and aggregation (solid) marked.

- `gantt(tl, out)`: a matplotlib figure (PNG, or PNG and SVG when `out` has no suffix,
  signed as flemu's: plots.save);
- `html(tl, out)`: one self-contained HTML file (inline SVG and a few lines of inline
  script, nothing fetched: it opens from file:// offline): wheel to zoom the time axis, drag
  to pan, double-click to reset, hover a bar for its client, round, phase, seconds and bytes.
"""
from __future__ import annotations

import html as _html
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from emulator.runs import outputs  # noqa: E402

from . import plots  # noqa: E402
from .timeline import COLORS, KINDS, LEGEND, RunTimeline  # noqa: E402


def _rows(tl: RunTimeline) -> dict:
    """Each client's row (0 at the top)."""
    return {c: i for i, c in enumerate(tl.clients)}


def _group_bounds(tl: RunTimeline) -> list:
    """(group, first row, last row) in drawing order."""
    out = []
    for i, c in enumerate(tl.clients):
        g = tl.groups[c]
        if out and out[-1][0] == g:
            out[-1][2] = i
        else:
            out.append([g, i, i])
    return out


def gantt(tl: RunTimeline, out=None, title=None):
    """The Gantt chart as a matplotlib figure, written to `out` when given."""
    rows = _rows(tl)
    n = len(tl.clients)
    fig, ax = plt.subplots(figsize=(12, max(2.5, 0.22 * n + 1.6)))
    for kind in KINDS:
        s = tl.spans[tl.spans["kind"] == kind]
        if len(s):
            y = s["client"].map(rows).to_numpy()
            ax.barh(y, (s["end"] - s["start"]).to_numpy(), left=s["start"].to_numpy(), height=0.8,
                    color=COLORS[kind], edgecolor="none", linewidth=0)
    for _, r in tl.rounds.iterrows():
        ax.axvline(r["end"], color="black", lw=0.8)
        if r["deadline"] == r["deadline"]:           # not NaN
            ax.axvline(r["deadline"], color="#b00020", lw=0.8, ls="--")
    for g, a, b in _group_bounds(tl):
        if a > 0:
            ax.axhline(a - 0.5, color="#444444", lw=0.6)
        ax.text(1.005, 1 - (a + b + 1) / 2 / max(n, 1), g, transform=ax.transAxes, va="center", fontsize=9)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks(range(n))
    ax.set_yticklabels([str(c) for c in tl.clients], fontsize=7 if n > 30 else 8)
    ax.set_xlim(tl.t0, tl.t1)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("client")
    ax.set_title(title or f"{tl.name}: what each client did when")
    handles = [Patch(color=COLORS[k], label=LEGEND[k]) for k in KINDS]
    handles += [plt.Line2D([], [], color="black", lw=0.8, label="aggregation"),
                plt.Line2D([], [], color="#b00020", lw=0.8, ls="--", label="deadline")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12 if n > 8 else -0.25),
              ncol=8, fontsize=8, frameon=False)
    fig.tight_layout()
    plots.save(fig, out)
    return fig


def _bars(tl: RunTimeline) -> list:
    """The spans as compact lists for the page's script: [row, kind, start, end, client,
    round, phase, bytes, cut]."""
    rows = _rows(tl)
    s = tl.spans
    return [[rows[int(c)], k, float(a), float(b), int(c), int(r), p, int(nb), cut]
            for c, k, a, b, r, p, nb, cut in zip(s["client"], s["kind"], s["start"], s["end"], s["round"],
                                                 s["phase"], s["bytes"], s["cut"])]


SCRIPT = r"""
(function () {
  var D = JSON.parse(document.getElementById('tl-data').textContent);
  var svg = document.getElementById('tl'), W = D.width, L = D.left, R = 20, H = D.rowh;
  var lo = D.t0, hi = D.t1, ns = 'http://www.w3.org/2000/svg', tip = document.getElementById('tip');
  function el(n, a) { var e = document.createElementNS(ns, n); for (var k in a) e.setAttribute(k, a[k]); return e; }
  function x(t) { return L + (t - lo) / (hi - lo) * (W - L - R); }
  function draw() {
    var g = document.getElementById('plot'); while (g.firstChild) g.removeChild(g.firstChild);
    D.bars.forEach(function (b, i) {
      if (b[3] < lo || b[2] > hi) return;
      var a = Math.max(x(b[2]), L), e = Math.min(x(b[3]), W - R);
      g.appendChild(el('rect', {x: a, y: D.top + b[0] * H + 1, width: Math.max(e - a, 0.5), height: H - 2,
                                fill: D.colors[b[1]], 'data-i': i}));
    });
    D.marks.forEach(function (m) {
      if (m[0] < lo || m[0] > hi) return;
      g.appendChild(el('line', {x1: x(m[0]), x2: x(m[0]), y1: D.top, y2: D.top + D.n * H,
                                stroke: m[1] ? '#b00020' : '#000', 'stroke-dasharray': m[1] ? '4 3' : '',
                                'stroke-width': 1}));
    });
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / 6 || 1)));
    if ((hi - lo) / step > 12) step *= 5; else if ((hi - lo) / step > 6) step *= 2;
    for (var t = Math.ceil(lo / step) * step; t <= hi; t += step) {
      var tx = el('text', {x: x(t), y: D.top + D.n * H + 14, 'text-anchor': 'middle', 'font-size': 10});
      tx.textContent = +t.toPrecision(6); g.appendChild(tx);
    }
  }
  svg.addEventListener('wheel', function (ev) {
    ev.preventDefault();
    var r = svg.getBoundingClientRect(), t = lo + (ev.clientX - r.left - L) / (W - L - R) * (hi - lo);
    var k = ev.deltaY < 0 ? 0.8 : 1.25;
    lo = t - (t - lo) * k; hi = t + (hi - t) * k; draw();
  }, {passive: false});
  var drag = null;
  svg.addEventListener('mousedown', function (ev) { drag = [ev.clientX, lo, hi]; });
  window.addEventListener('mouseup', function () { drag = null; });
  svg.addEventListener('dblclick', function () { lo = D.t0; hi = D.t1; draw(); });
  svg.addEventListener('mousemove', function (ev) {
    if (drag) {
      var dt = (ev.clientX - drag[0]) / (W - L - R) * (drag[2] - drag[1]);
      lo = drag[1] - dt; hi = drag[2] - dt; draw(); return;
    }
    var i = ev.target.getAttribute && ev.target.getAttribute('data-i');
    if (i === null || i === undefined) { tip.style.display = 'none'; return; }
    var b = D.bars[+i];
    tip.textContent = 'client ' + b[4] + ' (' + D.groups[b[4]] + ')' + (b[5] ? ', round ' + b[5] : '') + '\n' +
      b[6] + (b[8] ? ' cut: ' + b[8] : '') + '\n' + b[2].toFixed(4) + ' s to ' + b[3].toFixed(4) + ' s (' +
      (b[3] - b[2]).toFixed(4) + ' s)' + (b[7] ? '\n' + b[7] + ' bytes' : '');
    tip.style.display = 'block'; tip.style.left = (ev.pageX + 12) + 'px'; tip.style.top = (ev.pageY + 12) + 'px';
  });
  draw();
})();
"""


def _page(tl: RunTimeline, title: str) -> str:
    """The HTML text: a legend, the SVG (client and group labels drawn here; bars, marks and
    the time axis drawn by the script from the embedded data), the script."""
    rowh, top, left, width = 14, 10, 150, 1200
    n = len(tl.clients)
    height = top + n * rowh + 44
    data = {"bars": _bars(tl), "colors": COLORS, "n": n, "rowh": rowh, "top": top, "left": left, "width": width,
            "t0": tl.t0, "t1": tl.t1, "groups": {int(c): tl.groups[c] for c in tl.clients},
            "marks": [[float(r["end"]), 0] for _, r in tl.rounds.iterrows()]
            + [[float(r["deadline"]), 1] for _, r in tl.rounds.iterrows() if r["deadline"] == r["deadline"]]}
    labels = "".join(f'<text x="{left - 6}" y="{top + i * rowh + rowh - 3}" text-anchor="end" font-size="10">'
                     f'{c}</text>' for i, c in enumerate(tl.clients))
    labels += "".join(f'<text x="4" y="{top + (a + b + 1) * rowh / 2 + 4}" font-size="11" font-weight="bold">'
                      f'{_html.escape(str(g))}</text><line x1="0" x2="{width}" y1="{top + a * rowh}" '
                      f'y2="{top + a * rowh}" stroke="#888"/>' for g, a, b in _group_bounds(tl))
    labels += f'<text x="{(left + width) // 2}" y="{height - 4}" text-anchor="middle" font-size="11">virtual time (s)</text>'
    legend = " ".join(f'<span><i style="background:{COLORS[k]}"></i>{LEGEND[k]}</span>' for k in KINDS)
    legend += ' <span><b style="border-color:#000"></b>aggregation</span>' \
              ' <span><b style="border-color:#b00020;border-left-style:dashed"></b>deadline</span>'
    payload = json.dumps(data).replace("</", "<\\/")
    return f"""{outputs.REPORT_MARK}
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{_html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:16px}} .lg span{{margin-right:14px;font-size:13px}}
.lg i{{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle;border:1px solid #ccc}}
.lg b{{display:inline-block;height:12px;margin-right:4px;vertical-align:middle;border-left:2px solid}}
#tip{{position:absolute;display:none;white-space:pre;background:#fff;border:1px solid #888;padding:4px 6px;
font-size:12px;pointer-events:none}} svg{{user-select:none;cursor:crosshair}}</style></head>
<body><h2>{_html.escape(title)}</h2>
<p class="lg">{legend}</p>
<p style="font-size:12px;color:#555">Wheel: zoom the time axis; drag: pan; double-click: reset; hover a bar for its details.</p>
<svg id="tl" width="{width}" height="{height}">{labels}<g id="plot"></g></svg>
<div id="tip"></div>
<script type="application/json" id="tl-data">{payload}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def html(tl: RunTimeline, out, title=None) -> Path:
    """Write the interactive page to `out` (replacing only a page flemu wrote)."""
    out = outputs.check_file_target(Path(out), "timeline page")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_page(tl, title or f"{tl.name}: what each client did when"))
    return out
