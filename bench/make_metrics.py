#!/usr/bin/env python3
"""Write large vLLM /metrics snapshots of one server, deterministically, in the real text format.

The registry is the one the V1 snapshot fixtures use (fixtures/metrics/make_snapshots.py: vLLM's own
names, help texts, labels and histogram buckets) with many engines (`--engines`, data parallel), so
one exposition is about 23k lines. Each further snapshot is the same server a scrape later: counters
and histograms grow, gauges move.

usage: python bench/make_metrics.py OUT_PREFIX [--snapshots 3] [--engines 110] [--seed 1]
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures" / "metrics"))
import make_snapshots  # noqa: E402


def write(prefix: str, snapshots: int, engines: int, seed: int) -> list[tuple[str, int]]:
    """Write PREFIX-1.prom ... PREFIX-N.prom; return (path, lines) for each."""
    names = [str(i) for i in range(engines)]
    cache = {**make_snapshots.CACHE_V1, "num_gpu_blocks": "15270"}
    m = make_snapshots.V1("Qwen/Qwen3-32B", 40960, names, cache, deprecated=True, per_request_preemptions=True,
                          created=True)
    rng = random.Random(seed)
    out = []
    for i in range(1, snapshots + 1):
        for engine in names:
            m.requests(rng, engine, 20, slow=i > 1, preempted=0.05 * i)
            m.state(engine, rng.randint(50, 480), rng.randint(0, 60) * (i - 1), min(0.9999, 0.6 + 0.15 * i))
            m.preemptions[engine].inc(rng.randint(0, 40) * i)
        path = Path(f"{prefix}-{i}.prom")
        make_snapshots._write(path, m.registry)
        out.append((str(path), path.read_text().count("\n")))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix")
    parser.add_argument("--snapshots", type=int, default=3)
    parser.add_argument("--engines", type=int, default=110)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for path, lines in write(args.prefix, args.snapshots, args.engines, args.seed):
        print(f"wrote {path}: {lines:,} lines")


if __name__ == "__main__":
    main()
