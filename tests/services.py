"""Real services for the tests: simulated vLLM servers (tests/simvllm.py) and a real Prometheus.

Each is a process on a free loopback port, waited for with bounded timeouts and killed in teardown.
Without the prometheus binary the Prometheus tests skip with the reason, unless
VTRIAGE_REQUIRE_SERVICES=1 (set by .ci/run), where they fail: CI must never pass by skipping them.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

HERE = Path(__file__).resolve().parent
REQUIRE = os.environ.get("VTRIAGE_REQUIRE_SERVICES") == "1"


def require(what: str, found: bool, how: str) -> None:
    """Skip outside CI when a service is missing; fail in CI."""
    if found:
        return
    message = f"{what} is not installed ({how})"
    if REQUIRE:
        pytest.fail(message + "; VTRIAGE_REQUIRE_SERVICES=1 says it must be", pytrace=False)
    pytest.skip(message + "; set VTRIAGE_REQUIRE_SERVICES=1 to make this a failure")


def wait_for(check: Callable[[], object], timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except Exception as exc:  # the service may not answer yet
            last = exc
        else:
            if result:
                return result
            last = result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Process:
    proc: subprocess.Popen
    port: int
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_sim(scenario: str, *args: str) -> Process:
    """A simulated vLLM (or dcgm-exporter) process; returns once it listens."""
    proc = subprocess.Popen([sys.executable, str(HERE / "simvllm.py"), "--scenario", scenario, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise AssertionError(f"simvllm {scenario} did not start: {line!r}")
    return Process(proc, int(line.split()[1]))


@dataclass
class Target:
    job: str
    port: int
    labels: dict[str, str] = field(default_factory=dict)


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    require("prometheus", binary is not None, "apt-get install -y prometheus")
    return binary or ""


def start_prometheus(targets: list[Target], workdir: Path) -> Process:
    """A real Prometheus on a free loopback port, scraping `targets` every second, storing under workdir."""
    binary = prometheus_binary()
    jobs: dict[str, list[Target]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append(t)
    lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "scrape_configs:"]
    for job, members in jobs.items():
        lines += [f"  - job_name: {job}", "    static_configs:"]
        for t in members:
            lines.append(f"      - targets: ['127.0.0.1:{t.port}']")
            if t.labels:
                lines.append("        labels: " + json.dumps(t.labels))
    config = workdir / "prometheus.yml"
    config.write_text("\n".join(lines) + "\n")
    port = free_port()
    log = workdir / "prometheus.log"
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h",
                             "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"), cwd=workdir)
    server = Process(proc, port, log)
    try:
        wait_for(lambda: _get(f"{server.url}/-/ready", raw=True), 30, "Prometheus to be ready")
    except AssertionError:
        server.stop()
        raise AssertionError("Prometheus did not start: " + log.read_text()[-2000:]) from None
    return server


def _get(url: str, raw: bool = False):
    with urllib.request.urlopen(url, timeout=5) as response:
        body = response.read()
    return body if raw else json.loads(body)


def wait_for_targets(prometheus: Process, count: int, timeout: float = 30) -> None:
    def up() -> bool:
        targets = _get(f"{prometheus.url}/api/v1/targets")["data"]["activeTargets"]
        return len(targets) == count and all(t["health"] == "up" for t in targets)
    wait_for(up, timeout, f"{count} targets up in Prometheus")


def wait_for_samples(prometheus: Process, query: str, count: int, timeout: float = 30) -> None:
    """Until every series of `query` has at least `count` samples stored."""
    def enough() -> bool:
        params = urllib.parse.urlencode({"query": f"count_over_time({query}[5m])"})
        result = _get(f"{prometheus.url}/api/v1/query?{params}")["data"]["result"]
        return bool(result) and all(float(r["value"][1]) >= count for r in result)
    wait_for(enough, timeout, f"{count} samples of {query}")
