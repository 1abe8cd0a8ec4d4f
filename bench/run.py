#!/usr/bin/env python3
"""Time vtriage next to grep -cE, rg -c and cat on the same inputs, in the same run.

Inputs (generated once into --work and reused; bench/make_log.py, bench/make_metrics.py):
  serving   a 1 GiB V1 server log: request logging, access lines, a stats line every 10 s, an OOM
  stats-v1  128 MiB of V1 stats lines (`Engine 000: ...`), --disable-log-requests
  stats-v0  128 MiB of V0 stats lines (`Avg prompt throughput ...`, the old prefix)
  debug     128 MiB of VLLM_LOGGING_LEVEL=DEBUG output
  nccl      128 MiB of NCCL_DEBUG=INFO output (`host:pid:tid [rank] NCCL INFO ...`) around vLLM's lines
  syslog    128 MiB of a node's syslog (kernel, systemd, kubelet, containerd), the server's stats lines in it
  mixed     128 MiB of a serving log with other programs' output interleaved, a line of theirs for each of vLLM's
  metrics   three 23k-line /metrics snapshots of one server (--metrics A --metrics B --metrics C)
  metrics-12  twelve such snapshots, the first three those above: memory per further snapshot
  scrape    the same three snapshots served on 127.0.0.1 and scraped live (--metrics-url, 3 samples)
  startup   `vtriage --version` and a 20-line log

Baselines, the honest ones: `grep -cE` over every signature's anchor (the literal each signature
needs; the regexes themselves use lookaheads and named groups ERE has no syntax for), or over the
metric names vtriage reads; `rg -c -F` over the same literals when ripgrep is installed; `cat`.
Each command runs --repeat times, interleaved; the median counts. CPU is user+system of the whole
process tree (wait4, which includes the children it waited for); peak RSS is the largest sum of
resident memory over the tree, sampled every 10 ms from /proc. The machine's load average is
printed: on a shared machine wall time is noisy, CPU time much less so.

The metrics parse is also timed in-process against prometheus-client's bare parse of the same text
(bench/metrics_parse.py), since the whole command also splits the samples per engine and judges each one;
it also measures the memory held after reading 3, 12, 24 and 48 snapshots of the same server.

usage: python bench/run.py [--mb 1024] [--small-mb 128] [--repeat 3] [--only serving,stats-v1,...]
                           [--work DIR] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import functools
import http.server
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
sys.path.insert(0, str(HERE))
from triage.logs.signatures import load_signatures  # noqa: E402
from triage.metrics.names import (  # noqa: E402
    CACHE_CONFIG,
    HISTOGRAMS,
    KV_USAGE,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    REQUEST_PREEMPTIONS,
    RUNNING,
    WAITING,
)

import make_log  # noqa: E402
import make_metrics  # noqa: E402

LOG_SHAPES = ("stats-v1", "stats-v0", "debug", "nccl", "syslog", "mixed")    # the --small-mb logs
INPUTS = ("serving", *LOG_SHAPES, "metrics", "metrics-12", "scrape", "startup")
MANY_SNAPSHOTS = 12
HELD_SNAPSHOTS = 48          # read in-process by metrics_parse.py: the memory held past the cap on levels


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


def measure(cmd: list[str], output: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user+system, the whole tree) and peak tree RSS (KiB) of one run."""
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
        err = proc.stderr.read() if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1, 3):
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.decode(errors='replace')[-500:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, peak


def _ere(literal: str) -> str:
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", literal)


def _cached(work: Path, name: str, make) -> Path:
    """Generate an input once; a stamp file says it is complete."""
    path = work / name
    stamp = work / (name + ".done")
    if not stamp.exists():
        make(path)
        stamp.write_text("ok\n")
    return path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _serve(files: list[Path]) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve the snapshots in turn at /metrics on a loopback port (one per request, then the last)."""
    bodies = [f.read_bytes() for f in files]
    served = [0]

    class Handler(_Quiet):
        def do_GET(self) -> None:
            body = bodies[min(served[0], len(bodies) - 1)]
            served[0] += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.served = served  # type: ignore[attr-defined]
    return server, f"http://127.0.0.1:{server.server_address[1]}/metrics"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the serving log in MiB")
    parser.add_argument("--small-mb", type=int, default=128, help="size of the other logs in MiB")
    parser.add_argument("--engines", type=int, default=140, help="engines in each snapshot (140: about 23k lines)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(INPUTS), help="comma-separated subset of " + ", ".join(INPUTS))
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "vtriage-bench"),
                        help="where the generated inputs are kept between runs")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(only) - set(INPUTS)
    if unknown:
        parser.error(f"unknown input(s) {', '.join(sorted(unknown))}; choose from {', '.join(INPUTS)}")

    vtriage = shutil.which("vtriage") or str(ROOT / ".venv" / "bin" / "vtriage")
    rg = shutil.which("rg")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="vtriage-bench-"))
    output = scratch / "output"

    anchors = sorted({s.anchor for s in load_signatures().signatures})
    log_ere, log_fixed = scratch / "anchors.ere", scratch / "anchors.txt"
    log_ere.write_text("".join(_ere(a) + "\n" for a in anchors))
    log_fixed.write_text("".join(a + "\n" for a in anchors))
    names = sorted({n for group in (KV_USAGE, PREEMPTIONS, RUNNING, WAITING, CACHE_CONFIG, PREFIX_QUERIES,
                                    PREFIX_HITS, REQUEST_PREEMPTIONS) for n in group}
                   | {n for _, group, _ in HISTOGRAMS for n in group})
    metric_ere, metric_fixed = scratch / "metrics.ere", scratch / "metrics.txt"
    metric_ere.write_text("".join(_ere(n) + "\n" for n in names))
    metric_fixed.write_text("".join(n + "\n" for n in names))

    def baselines(files: list[Path], ere: Path, fixed: Path) -> dict[str, list[str]]:
        out = {"grep -cE": ["grep", "-cE", "-f", str(ere), *map(str, files)]}
        if rg:
            out["rg -c"] = [rg, "-c", "--no-config", "-F", "-f", str(fixed), *map(str, files)]
        out["cat"] = ["cat", *map(str, files)]
        return out

    cases: dict[str, dict[str, list[str]]] = {}
    about: dict[str, str] = {}
    log_kinds = {"serving": args.mb, **{kind: args.small_mb for kind in LOG_SHAPES}}
    for kind, mib in log_kinds.items():
        if kind not in only:
            continue
        path = _cached(work, f"{kind}-{mib}mib-s1.log",
                       functools.partial(lambda k, m, p: make_log.write(str(p), m << 20, 1, k), kind, mib))
        lines = sum(block.count(b"\n") for block in iter(functools.partial(open(path, "rb").read, 1 << 24), b""))
        about[kind] = f"{path.stat().st_size / 2**20:,.0f} MiB, {lines:,} lines"
        cases[kind] = {"vtriage": [vtriage, "--format", "json", str(path)], **baselines([path], log_ere, log_fixed)}
    many: list[Path] = []
    held_paths: list[Path] = []
    if {"metrics", "metrics-12", "scrape"} & set(only):
        prefix = work / f"metrics-{args.engines}e"
        stamp = work / f"metrics-{args.engines}e-x{HELD_SNAPSHOTS}.done"
        if not stamp.exists():
            make_metrics.write(str(prefix), HELD_SNAPSHOTS, args.engines, 1)    # the first 12 as with 12
            stamp.write_text("ok\n")
        held_paths = [Path(f"{prefix}-{i}.prom") for i in range(1, HELD_SNAPSHOTS + 1)]
        many = held_paths[:MANY_SNAPSHOTS]
        lines = [p.read_bytes().count(b"\n") for p in many]
        about["metrics"] = f"3 snapshots of {', '.join(f'{n:,}' for n in lines[:3])} lines"
        about["metrics-12"] = f"{MANY_SNAPSHOTS} snapshots of {min(lines):,} to {max(lines):,} lines"
    snapshots = many[:3]
    for kind, given in (("metrics", snapshots), ("metrics-12", many)):
        if kind in only:
            cases[kind] = {"vtriage": [vtriage, "--format", "json", *[a for p in given for a in ("--metrics", str(p))],
                                       "--interval", "15"],
                           **baselines(given, metric_ere, metric_fixed)}
    server = None
    if "scrape" in only:
        server, url = _serve(snapshots)
        about["scrape"] = "the three snapshots, scraped live from 127.0.0.1 (--samples 3 --interval 0.2)"
        cases["scrape"] = {"vtriage": [vtriage, "--format", "json", "--metrics-url", url, "--samples", "3",
                                       "--interval", "0.2"]}
    if "startup" in only:
        small = _cached(work, "twenty-lines.log", lambda p: _twenty_lines(p, scratch))
        about["startup"] = "vtriage --version; a 20-line log"
        cases["startup"] = {"vtriage --version": [vtriage, "--version"],
                            "vtriage 20-line log": [vtriage, str(small)],
                            "python -c pass": [sys.executable, "-c", "pass"],
                            **baselines([small], log_ere, log_fixed)}

    # pip compiles a wheel's modules to bytecode as it installs them; an editable install (this checkout) leaves
    # that to the first import, which PYTHONDONTWRITEBYTECODE forbids. Compiled here, start-up is timed as installed.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "triage")], check=True,
                   stdout=subprocess.DEVNULL)
    for kind in cases:
        for cmd in cases[kind].values():
            if cmd[0] == "cat":
                measure(cmd, output)                # the inputs in the page cache for everyone
    runs: dict[str, dict[str, list[tuple[float, float, int]]]] = {k: {n: [] for n in c} for k, c in cases.items()}
    load_before = os.getloadavg()
    for _ in range(args.repeat):
        for kind, commands in cases.items():
            for name, cmd in commands.items():
                if server is not None and kind == "scrape":
                    server.served[0] = 0  # type: ignore[attr-defined]
                runs[kind][name].append(measure(cmd, output))
    load_after = os.getloadavg()
    if server is not None:
        server.shutdown()

    parse = None
    if "metrics" in only:
        parse = json.loads(subprocess.run([sys.executable, str(HERE / "metrics_parse.py"), "--repeat",
                                           str(max(3, args.repeat)), "--timed", "3", *map(str, held_paths)],
                                          check=True, capture_output=True, text=True).stdout)

    print(f"{platform.node() or 'this machine'}: {os.cpu_count()} CPUs, {platform.python_implementation()} "
          f"{platform.python_version()}; median of {args.repeat}; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after (wall times are noisy on a shared machine; CPU is the steadier figure)")
    figures: dict[str, dict] = {}
    for kind, commands in runs.items():
        print(f"\n{kind}: {about.get(kind, '')}")
        print(f"  {'command':<22}{'wall s':>9}{'CPU s':>9}{'tree RSS':>11}{'wall x grep':>13}{'CPU x grep':>12}")
        base = commands.get("grep -cE")
        base_wall = statistics.median(r[0] for r in base) if base else None
        base_cpu = statistics.median(r[1] for r in base) if base else None
        figures[kind] = {"input": about.get(kind, "")}
        for name, results in commands.items():
            wall = statistics.median(r[0] for r in results)
            cpu = statistics.median(r[1] for r in results)
            rss = max(r[2] for r in results) / 1024
            row = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_tree_rss_mib": round(rss, 1),
                   "walls": [round(r[0], 3) for r in results], "cpus": [round(r[1], 3) for r in results]}
            ratios = ""
            if base_wall and base_cpu and name.startswith("vtriage") and kind != "startup":
                row["wall_x_grep"], row["cpu_x_grep"] = round(wall / base_wall, 2), round(cpu / max(base_cpu, 1e-3), 2)
                ratios = f"{row['wall_x_grep']:>13.2f}{row['cpu_x_grep']:>12.2f}"
            figures[kind][name] = row
            print(f"  {name:<22}{wall:>9.2f}{cpu:>9.2f}{rss:>8.1f} Mi{ratios}")
        if kind in ("serving", *LOG_SHAPES) and "vtriage" in commands:
            count = int(about[kind].split(", ")[1].split()[0].replace(",", ""))
            per_line = statistics.median(r[1] for r in commands["vtriage"]) / count * 1e6
            figures[kind]["vtriage_cpu_us_per_line"] = round(per_line, 2)
            print(f"  vtriage CPU per line: {per_line:.2f} us (start-up included)")
    if parse is not None:
        figures["metrics"]["parse"] = parse
        print(f"\nmetrics parse, in-process, per snapshot (median): vtriage {parse['vtriage_s']:.3f} s, "
              f"prometheus-client bare parse {parse['bare_s']:.3f} s: {parse['ratio']:.2f}x")
        for held in parse["held"]:
            print(f"  {held['snapshots']:>2} snapshots read: {held['samples']:,} samples held, "
                  f"{held['retained_mib']:.1f} MiB")
        print(f"  memory per further snapshot: {parse['mib_per_snapshot']:.3f} MiB from 3 to 12, "
              f"{parse['mib_per_snapshot_past_cap']:.3f} MiB from 24 to 48 (past the cap on levels held)")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "python": platform.python_version(),
                                               "repeat": args.repeat, "load_before": load_before,
                                               "load_after": load_after, "runs": figures}, indent=2) + "\n")
    shutil.rmtree(scratch)


def _twenty_lines(path: Path, scratch: Path) -> None:
    """The first twenty lines of a small serving log: startup, requests and a stats line."""
    big = scratch / "head.log"
    make_log.write(str(big), 1 << 16, 2, "serving")
    with open(big) as src:
        path.write_text("".join(line for _, line in zip(range(20), src)))


if __name__ == "__main__":
    main()
