#!/usr/bin/env python3
"""Time vtriage's /metrics parse against prometheus-client's bare parse of the same text, in-process.

Both read the text already in memory, alternately, --repeat times for each of the first --timed snapshots;
the medians count. Then the first 3, 12, 24 and 48 snapshots given (as many as there are) are read the way
`vtriage --metrics A --metrics B ... --interval 15` reads them, and the memory still held afterwards is measured
(tracemalloc): what a further snapshot costs below the cap on levels held (metrics/thinning.py LEVELS_HELD; 3 to
12) and past it (24 to 48). Prints one JSON object.

usage: python bench/metrics_parse.py [--repeat 3] [--timed 3] SNAPSHOT.prom...
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from triage.metrics.inputs import read_files  # noqa: E402
from triage.metrics.parse import parse_exposition  # noqa: E402
from triage.redact import Redactor  # noqa: E402

HELD_AFTER = (3, 12, 24, 48)


def _held(paths: list[str]) -> dict:
    """Samples and memory held once `paths` are read as the command line reads them."""
    gc.collect()
    tracemalloc.start()
    read = read_files(paths, 15.0, Redactor())      # the command line's redaction, by default
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"snapshots": len(paths), "samples": len(read.samples), "retained_mib": round(retained / 2**20, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timed", type=int, default=3, help="how many of the snapshots to time the parse on")
    parser.add_argument("snapshots", nargs="+")
    args = parser.parse_args()
    timed = args.snapshots[:args.timed]
    texts = [Path(p).read_text() for p in timed]
    ours, bare = [], []
    for _ in range(args.repeat):
        for name, text in zip(timed, texts):
            gc.collect()
            start = time.process_time()
            list(text_string_to_metric_families(text))
            bare.append(time.process_time() - start)
            gc.collect()
            start = time.process_time()
            parse_exposition(text, name)
            ours.append(time.process_time() - start)
    del texts
    held = [_held(args.snapshots[:count]) for count in HELD_AFTER if count <= len(args.snapshots)]
    vtriage_s, bare_s = statistics.median(ours), statistics.median(bare)
    print(json.dumps({"vtriage_s": round(vtriage_s, 4), "bare_s": round(bare_s, 4),
                      "ratio": round(vtriage_s / bare_s, 2), "held": held,
                      "mib_per_snapshot": _growth(held, 3, 12), "mib_per_snapshot_past_cap": _growth(held, 24, 48)}))


def _growth(held: list[dict], since: int, until: int) -> float | None:
    """MiB held for each further snapshot between reading `since` and `until` of them."""
    mib = {h["snapshots"]: h["retained_mib"] for h in held}
    if since not in mib or until not in mib:
        return None
    return round((mib[until] - mib[since]) / (until - since), 3)


if __name__ == "__main__":
    main()
