#!/usr/bin/env python3
"""Print a bench/run.py --json file as the Markdown table docs/performance.md shows.

usage: python bench/table.py bench/out/bench.json
"""
from __future__ import annotations

import json
import sys


def table(data: dict) -> str:
    rows = ["| input | command | wall s | CPU s | peak tree RSS | wall × grep | CPU × grep |",
            "|---|---|---:|---:|---:|---:|---:|"]
    notes: list[str] = []
    for kind, figures in data["runs"].items():
        first = True
        for name, row in figures.items():
            if not isinstance(row, dict) or "wall_s" not in row:
                continue
            head = f"**{kind}**<br>{figures['input']}" if first else ""
            command = f"**`{name}`**" if name.startswith("vtriage") else f"`{name}`"
            ratios = (f"**{row['wall_x_grep']:.2f}** | **{row['cpu_x_grep']:.2f}**" if "wall_x_grep" in row
                      else " | ")
            rows.append(f"| {head} | {command} | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | "
                        f"{row['peak_tree_rss_mib']:.1f} MiB | {ratios} |")
            first = False
        if "vtriage_cpu_us_per_line" in figures:
            notes.append(f"{kind}: vtriage {figures['vtriage_cpu_us_per_line']:.1f} µs of CPU per line, start-up "
                         "included.")
    parse = data["runs"].get("metrics", {}).get("parse")
    if parse:
        held = "; ".join(f"{h['snapshots']} snapshots read, {h['samples']:,} samples and {h['retained_mib']:.1f} MiB "
                         "held" for h in parse["held"])
        notes.append(f"/metrics parse in-process, per 23k-line snapshot: vtriage {parse['vtriage_s']:.3f} s, "
                     f"prometheus-client's bare parse {parse['bare_s']:.3f} s: **{parse['ratio']:.2f}x**. {held} "
                     f"afterwards (tracemalloc): **{parse['mib_per_snapshot']:.2f} MiB** a further snapshot from 3 to "
                     f"12, **{parse['mib_per_snapshot_past_cap']:.2f} MiB** from 24 to 48 (past the cap on levels "
                     "held, metrics/thinning.py).")
    per_line = "\n".join(n for n in notes if "per line" in n)
    others = [n for n in notes if "per line" not in n]
    return "\n\n".join(["\n".join(rows), per_line, *others]) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        print(table(json.load(handle)), end="")
