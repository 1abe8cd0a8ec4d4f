#!/usr/bin/env python3
"""Time vtriage's /metrics parse against prometheus-client's bare parse of the same text, in-process.

Both read the text already in memory, alternately, --repeat times per snapshot; the medians count.
Then the snapshots are read the way `vtriage --metrics A --metrics B --metrics C` reads them and
the memory still held afterwards is measured (tracemalloc). Prints one JSON object.

usage: python bench/metrics_parse.py [--repeat 3] SNAPSHOT.prom...
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("snapshots", nargs="+")
    args = parser.parse_args()
    texts = [Path(p).read_text() for p in args.snapshots]
    ours, bare = [], []
    for _ in range(args.repeat):
        for name, text in zip(args.snapshots, texts):
            gc.collect()
            start = time.process_time()
            list(text_string_to_metric_families(text))
            bare.append(time.process_time() - start)
            gc.collect()
            start = time.process_time()
            parse_exposition(text, name)
            ours.append(time.process_time() - start)
    del texts
    gc.collect()
    tracemalloc.start()
    read = read_files(args.snapshots, 15.0)
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    vtriage_s, bare_s = statistics.median(ours), statistics.median(bare)
    print(json.dumps({"vtriage_s": round(vtriage_s, 4), "bare_s": round(bare_s, 4),
                      "ratio": round(vtriage_s / bare_s, 2), "samples": len(read.samples),
                      "retained_mib": round(retained / 2**20, 1)}))


if __name__ == "__main__":
    main()
