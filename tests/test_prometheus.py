"""--prometheus against a real Prometheus server (Debian's `prometheus`) on loopback, scraping simulated
vLLM pods every second: the fleet view, one pod joined with its log, an instant, and wrong queries.

No mock of Prometheus' API: the queries go to the real query_range. Prometheus negotiates OpenMetrics,
so prometheus-client exposes vllm:x as vllm_x there, as it does for a real vLLM.
"""
from __future__ import annotations

import pytest

from conftest import FIXTURES, json_report, run_cli
from services import Target, prometheus_binary, start_prometheus, start_sim, wait_for_samples, wait_for_targets

PODS = {"vllm-0": "healthy", "vllm-1": "preempting", "vllm-2": "healthy"}
FLEET = '{namespace="llm",pod=~"vllm-.*"}'
WINDOW = ("--since", "20s")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """Three vLLM pods and vllm-2's dcgm-exporter, scraped every second by a real Prometheus."""
    prometheus_binary()
    sims = []
    server = None
    try:
        targets = []
        for pod, scenario in PODS.items():
            sims.append(start_sim(scenario))
            targets.append(Target("vllm", sims[-1].port, {"namespace": "llm", "pod": pod}))
        sims.append(start_sim("dcgm", "--dcgm-pod", "vllm-2"))      # its own pod label becomes exported_pod
        targets.append(Target("dcgm", sims[-1].port, {"namespace": "gpu-operator", "pod": "dcgm-exporter-7x2"}))
        server = start_prometheus(targets, tmp_path_factory.mktemp("prometheus"))
        wait_for_targets(server, len(targets), timeout=45)
        wait_for_samples(server, '{__name__=~"vllm[:_]num_requests_running"}', 8, timeout=45)
        yield server
    finally:
        if server is not None:
            server.stop()
        for sim in sims:
            sim.stop()


def _error(*args) -> str:
    result = run_cli(*args)
    err = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b"" and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_fleet_view_text(prometheus):
    result = run_cli("--prometheus", prometheus.url, "--selector", FLEET, *WINDOW)
    out = result.stdout.decode()
    assert result.returncode == 1, result.stderr.decode()
    assert "FLEET  3 instances" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  vllm-")}
    assert set(lines) == set(PODS)
    assert "healthy" in lines["vllm-0"] and "preemption_slowdown" in lines["vllm-1"]
    assert "external_pressure" in lines["vllm-2"] and "vs reservation" in lines["vllm-2"]
    assert "stands out: preempting:" in out and "stands out: its GPU holds" in out
    assert "Overall: PREEMPTION SLOWDOWN" in out and "In detail: vllm-1" in out


def test_fleet_view_json(prometheus):
    code, data = json_report("--prometheus", prometheus.url, "--selector", FLEET, *WINDOW)
    fleet = data["fleet"]
    assert code == 1 and data["verdict"] == fleet["verdict"] == "preemption_slowdown"
    assert fleet["source"]["kind"] == "prometheus" and fleet["source"]["step_seconds"] == 1
    assert fleet["source"]["selector"] == FLEET and fleet["detail"] == "vllm-1"
    by_pod = {i["name"]: i for i in fleet["instances"]}
    assert {p: i["verdict"] for p, i in by_pod.items()} == {
        "vllm-0": "healthy", "vllm-1": "preemption_slowdown", "vllm-2": "external_pressure"}
    assert fleet["counts"] == {"external_pressure": 1, "healthy": 1, "preemption_slowdown": 1}
    busy = by_pod["vllm-1"]["figures"]
    assert busy["preemptions"] > 10 and busy["preemption_rate_per_min"] > 60 and busy["waiting_growth"] > 0
    assert by_pod["vllm-0"]["figures"]["preemptions"] == 0 and by_pod["vllm-0"]["stands_out"] == []
    assert by_pod["vllm-2"]["figures"]["gpu_memory_beyond_budget_gib"] == pytest.approx(6.0, abs=0.3)
    # the detailed diagnosis is vllm-1's, with Prometheus series as evidence
    evidence = data["findings"][0]["evidence"]
    assert evidence and all(e["source"].startswith("prometheus:vllm_") and e["line"] == 0 for e in evidence)
    assert all('pod="vllm-1"' in e["source"] for e in evidence)
    assert data["facts"]["metrics_snapshots"]["value"] >= 8          # one per 1 s step with data


def test_job_shorthand_still_finds_the_gpu_exporter(prometheus):
    code, data = json_report("--prometheus", prometheus.url, "--job", "vllm", *WINDOW)
    assert {i["name"]: i["verdict"] for i in data["fleet"]["instances"]}["vllm-2"] == "external_pressure"


def test_one_pod_joined_with_its_log(prometheus):
    log = FIXTURES / "incidents" / "v1-0.10.1-silent-preemption" / "server.log"
    code, data = json_report(str(log), "--prometheus", prometheus.url, "--selector", '{pod="vllm-1"}', *WINDOW)
    assert code == 1 and data["verdict"] == "preemption_slowdown" and data["fleet"]["log_joined"] is True
    sources = {e["source"] for e in data["findings"][0]["evidence"]}
    assert str(log) in sources and any(s.startswith("prometheus:") for s in sources)
    assert data["facts"]["kv_cache_tokens"]["evidence"][0]["source"] == str(log)   # the log's figures come first


def test_a_log_is_not_joined_with_a_whole_fleet(prometheus):
    log = FIXTURES / "incidents" / "v1-0.10.1-silent-preemption" / "server.log"
    code, data = json_report(str(log), "--prometheus", prometheus.url, "--selector", FLEET, *WINDOW)
    assert data["fleet"]["log_joined"] is False
    assert any("the log was diagnosed on its own" in w for w in data["warnings"])


def test_an_instant_reads_like_one_snapshot(prometheus):
    code, data = json_report("--prometheus", prometheus.url, "--selector", FLEET, "--at", "now")
    assert data["fleet"]["source"]["start"] == data["fleet"]["source"]["end"]
    busy = next(i for i in data["fleet"]["instances"] if i["name"] == "vllm-1")
    assert data["facts"]["metrics_snapshots"]["value"] == 1 and busy["figures"]["preemptions_since_start"] > 0
    assert "since the server started" in data["facts"]["preemptions_since_start"]["note"]
    assert "preemptions" not in busy["figures"]       # a lifetime count is not a count over the window
    # the instant's time minus the counters' _created is the uptime that makes the count a rate
    assert "_created" in data["facts"]["server_uptime_seconds"]["note"]
    assert busy["figures"]["preemption_rate_per_min"] > 0


def test_selector_that_matches_nothing(prometheus):
    err = _error("--prometheus", prometheus.url, "--selector", '{pod="vllm-9"}', *WINDOW)
    assert 'no vLLM series match {pod="vllm-9"}' in err and "(hint: " in err


def test_selector_prometheus_refuses(prometheus):
    err = _error("--prometheus", prometheus.url, "--selector", '{pod=~"vllm-(.*"}', *WINDOW)
    assert "Prometheus refused the query" in err and "--selector" in err


def test_not_a_prometheus_server(prometheus):
    sim = start_sim("healthy")
    try:
        err = _error("--prometheus", sim.url, *WINDOW)
    finally:
        sim.stop()
    assert "/api/v1/query_range: HTTP 404 Not Found" in err and "Prometheus server" in err


def test_window_flags_are_checked():
    assert "neither a duration nor a time" in _error("--prometheus", "http://127.0.0.1:9", "--since", "an hour")
    assert "is not a duration" in _error("--prometheus", "http://127.0.0.1:9", "--step", "fast")
    assert "cannot be combined" in _error("--prometheus", "http://127.0.0.1:9", "--at", "now", "--since", "5m")
    assert "needs --prometheus" in _error("--selector", '{pod="x"}', "--metrics", "x.prom")
