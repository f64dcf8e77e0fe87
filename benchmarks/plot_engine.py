"""README's engine figure (issue 19): wall seconds per virtual round against fleet size, the
process and vector engines beside a bare SimPy loop doing the same timeouts (P3, 10 % of the
fleet per round), and the vector engine at a fixed 100 and at 1 % participating (P4).

    python -m benchmarks.plot_engine [benchmarks/results/engine.json]
writes docs/figures/engine_scale.png."""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None):
    argv = argv if argv is not None else sys.argv[1:]
    path = Path(argv[0]) if argv else HERE / "results" / "engine.json"
    res = json.loads(path.read_text())
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    p3 = res.get("p3", {}).get("runs", [])
    if p3:
        n = [r["clients"] for r in p3]
        ax.plot(n, [r["process_s_per_round"] for r in p3], "o-", label="process engine (10 % per round)")
        ax.plot(n, [r["vector_s_per_round"] for r in p3], "s-", label="vector engine (10 % per round)")
        ax.plot(n, [r["bare_simpy_s"] / r["rounds"] for r in p3], "k^--", label="bare SimPy, same timeouts")
    for mode, style, label in (("share", "d:", "vector engine, 1 % per round"),
                               ("fixed", "v:", "vector engine, 100 per round")):
        rs = [r for r in res.get("p4", {}).get("runs", []) if r["mode"] == mode]
        if rs:
            ax.plot([r["clients"] for r in rs], [r["s_per_round"] for r in rs], style, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("clients in the fleet")
    ax.set_ylabel("wall seconds per virtual round")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title("Engine alone (no training): Markov availability, per-client links", fontsize=10)
    fig.tight_layout()
    out = HERE.parent / "docs" / "figures" / "engine_scale.png"
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
