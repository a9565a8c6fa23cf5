"""Draw how `nvtx-tf analyze` and `nsys recipe nvtx_sum` grow with the ranks: time (median,
quartiles as bars), CPU time (user + system of all the command's processes: what a shared
machine's load changes least) and peak RSS against ranks, from the JSON files of
``bench_analyze.py --json`` (several runs: e.g. 8 and 64 ranks in one, 256 in another; a
later file's (engine, ranks) replaces an earlier one's).

    python benchmarks/plot_analyze_scale.py RUN.json [RUN.json ...] --png docs/analyze_scale.png

(docs/analyze_scale.png: from docs/analyze_scale.json, the run of docs/benchmarks.md.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _programs import quartiles  # noqa: E402


def load(paths: list[Path]) -> tuple[dict[str, dict[int, dict]], list[str], int]:
    """{engine: {ranks: row}}, the runs' dates, their ranges per rank."""
    rows: dict[str, dict[int, dict]] = {}
    dates, ranges = [], set()
    for path in paths:
        run = json.loads(path.read_text())
        dates.append(run["date"])
        ranges.add(run["ranges"])
        for row in run["rows"]:
            rows.setdefault(row["engine"], {})[row["ranks"]] = row
    if len(ranges) != 1:
        raise SystemExit(f"runs of different ranges per rank: {sorted(ranges)}")
    return rows, dates, ranges.pop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench_analyze.py --json files")
    parser.add_argument("--png", type=Path, required=True, help="the picture to write")
    args = parser.parse_args()
    rows, dates, ranges = load(args.runs)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 5), dpi=100)
    for engine, by_ranks in sorted(rows.items(), key=lambda kv: (kv[0].startswith("nsys"), kv[0])):
        ranks = sorted(by_ranks)
        spread = [quartiles(by_ranks[n]["seconds"]) for n in ranks]
        median = [statistics.median(by_ranks[n]["seconds"]) for n in ranks]
        style = "--" if engine.startswith("nsys") else "-"
        bars = [[m - q[0] for m, q in zip(median, spread)], [q[2] - m for m, q in zip(median, spread)]]
        line = left.errorbar(ranks, median, yerr=bars, fmt=style + "o", capsize=3, label=engine)
        timed = [n for n in ranks if "cpu" in by_ranks[n]]
        middle.plot(timed, [by_ranks[n]["cpu"] for n in timed], style + "o", color=line[0].get_color(), label=engine)
        peaks = [by_ranks[n]["peak_mib"] for n in ranks]
        right.plot(ranks, peaks, style + "o", color=line[0].get_color(), label=engine)
    for ax in (left, middle, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"ranks ({ranges / 1e6:g}M ranges each)")
        ax.grid(True, which="both", alpha=0.3)
    every = sorted({n for by in rows.values() for n in by})
    for ax in (left, middle, right):
        ax.set_xticks(every, labels=[str(n) for n in every])
    right.set_ylim(0, 1150)  # (memory on a linear scale, from 0 to past 1 GiB)
    for ax in (left, middle):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_locator(matplotlib.ticker.LogLocator(subs=(2, 5)))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    left.set_ylabel("seconds (median; bars: quartiles)")
    left.set_title("time: every output of analyze, statistics of the recipe", fontsize=10)
    middle.set_ylabel("CPU seconds (median), all its processes")
    middle.set_title("CPU time (the load of the shared machine aside)", fontsize=10)
    right.axhline(1024, color="0.4", linewidth=1, linestyle=":")
    right.text(every[0], 1024 * 1.05, "1 GiB", color="0.3", fontsize=8)
    right.set_ylabel("peak RSS of the largest process, MiB")
    right.set_title("memory", fontsize=10)
    left.legend(fontsize=7, loc="upper left")
    title = f"nvtx-tf analyze against nsys recipe nvtx_sum on one 2-core machine ({', '.join(dates)})"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.png)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
