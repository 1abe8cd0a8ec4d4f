#!/usr/bin/env python3
"""Time vtriage against grep -E on the same log, in the same run, and report the ratio.

The baseline is `grep -E` given every signature's anchor (the literal each signature needs; the
signature regexes themselves use lookaheads and named groups ERE has no syntax for), writing its
matches to a file. (Not to /dev/null: GNU grep notices /dev/null and stops at the first match.) Each command runs --repeat times, interleaved; the median counts. Peak RSS is
the largest sum of resident memory over vtriage's process tree (its worker processes included),
sampled every 10 ms from /proc.

usage: python bench/run.py [--mb 1024] [--repeat 3] [--log PATH] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from triage.signatures import load_signatures  # noqa: E402

import make_log  # noqa: E402


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of `pid` and all its descendants, in KiB (0 once it has exited)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        try:
            with open(f"/proc/{current}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def measure(cmd: list[str], output: Path) -> tuple[float, int]:
    """Wall seconds and peak tree RSS (KiB) of one run, its output written to `output`."""
    peak = 0
    start = time.perf_counter()
    with open(output, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_rss_kib(proc.pid))
                time.sleep(0.01)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, err = proc.communicate()
        elapsed = time.perf_counter() - start
        done.set()
        sampler.join()
    if proc.returncode not in (0, 1, 3):
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.decode(errors='replace')[-500:]}")
    return elapsed, peak


def ere(anchor: str) -> str:
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", anchor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the generated log in MiB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--log", help="use this log instead of generating one")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    vtriage = shutil.which("vtriage") or str(ROOT / ".venv" / "bin" / "vtriage")
    work = Path(tempfile.mkdtemp(prefix="vtriage-bench-"))
    log = Path(args.log) if args.log else work / f"vllm-{args.mb}mib.log"
    if not args.log:
        lines = make_log.write(str(log), args.mb << 20, seed=1)
        os.sync()                               # the new file's write-back must not run during the timings
    else:
        lines = sum(1 for _ in open(log, "rb"))
    size = log.stat().st_size
    patterns = work / "anchors.ere"
    anchors = sorted({s.anchor for s in load_signatures().signatures})
    patterns.write_text("\n".join(ere(a) for a in anchors) + "\n")

    commands = {
        "grep -E (baseline)": ["grep", "-E", "-f", str(patterns), str(log)],
        "vtriage --format json": [vtriage, "--format", "json", str(log)],
    }
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
    output = work / "output"
    measure(["cat", str(log)], output)          # warm the page cache for both
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            runs[name].append(measure(cmd, output))

    base = statistics.median(t for t, _ in runs["grep -E (baseline)"])
    print(f"log: {size / 2**20:,.0f} MiB, {lines:,} lines; {os.cpu_count()} CPUs; {platform.python_implementation()} "
          f"{platform.python_version()}; median of {args.repeat}")
    print(f"{'command':<24}{'seconds':>9}{'MB/s':>9}{'lines/s':>12}{'peak RSS':>11}{'x grep':>8}")
    figures = {}
    for name, results in runs.items():
        seconds = statistics.median(t for t, _ in results)
        rss = max(r for _, r in results)
        figures[name] = {"seconds": round(seconds, 3), "mb_per_s": round(size / 1e6 / seconds, 1),
                         "lines_per_s": round(lines / seconds), "peak_rss_mib": round(rss / 1024, 1),
                         "ratio_to_grep": round(seconds / base, 2)}
        f = figures[name]
        print(f"{name:<24}{f['seconds']:>9.2f}{f['mb_per_s']:>9.1f}{f['lines_per_s']:>12,}{f['peak_rss_mib']:>9.1f}Mi"
              f"{f['ratio_to_grep']:>8.2f}")
    small = work / "vllm-10mib.log"
    make_log.write(str(small), 10 << 20, seed=2)
    ten = statistics.median(measure([vtriage, str(small)], output)[0] for _ in range(args.repeat))
    print(f"10 MiB log, start-up included: {ten:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"log_bytes": size, "lines": lines, "cpus": os.cpu_count(),
                                               "runs": figures, "ten_mib_seconds": round(ten, 3)}, indent=2) + "\n")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
