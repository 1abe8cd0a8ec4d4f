"""--metrics-url against simulated vLLM servers: prometheus-client's real registry on a real HTTP server
(tests/simvllm.py), counters moving between scrapes; and every way the endpoint can be wrong."""
from __future__ import annotations

import io
import json
import socket
import time

import jsonschema
import pytest

from triage import cli

from conftest import FIXTURES, ROOT, run_cli
from services import start_sim

SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())
FAST = ("--samples", "3", "--interval", "0.5")


@pytest.fixture(scope="module")
def sims():
    started = {}
    try:
        for name, scenario, extra in (("healthy", "healthy", ()), ("preempting", "preempting", ()),
                                      ("saturating", "saturating", ()), ("v0", "v0-preempting", ()),
                                      ("dcgm", "dcgm", ("--dcgm-pod", "vllm-0")),
                                      ("html", "healthy", ("--mode", "html")), ("json", "healthy", ("--mode", "json")),
                                      ("garbage", "healthy", ("--mode", "garbage")),
                                      ("slow", "healthy", ("--mode", "slow")),
                                      ("forbidden", "healthy", ("--mode", "forbidden")),
                                      ("token", "healthy", ("--token", "s3cr3t-t0ken-abcdef"))):
            started[name] = start_sim(scenario, *extra)
        yield {name: f"{p.url}/metrics" for name, p in started.items()}
    finally:
        for p in started.values():
            p.stop()


def _json(*args, env=None):
    result = run_cli("--format", "json", *args, env=env)
    assert result.stderr == b"", result.stderr.decode()
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return result.returncode, data


def _error(*args, env=None, hint: bool = True) -> str:
    result = run_cli(*args, env=env)
    err = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b"", err
    assert err.count("\n") == 1 and "Traceback" not in err and ("(hint: " in err or not hint)
    return err


# --- a live server, several scrapes ------------------------------------------------------------------

def test_preempting_server_gives_a_rate(sims):
    code, data = _json("--metrics-url", sims["preempting"], *FAST)
    facts = {k: v["value"] for k, v in data["facts"].items()}
    assert code == 1 and data["verdict"] == "preemption_slowdown"
    assert facts["metrics_snapshots"] == 3
    assert 0.8 <= facts["metrics_window_seconds"] <= 5.0           # 2 x 0.5 s, plus the scrapes themselves
    assert facts["preemptions"] > 0 and facts["preemption_rate_per_min"] > 60
    assert facts["waiting_growth"] > 0 and facts["kv_cache_usage_max"] >= 0.97
    assert facts["requests_preempted_share"] > 0 and facts["ttft_p95_seconds"] > 1.0
    evidence = data["facts"]["preemptions"]["evidence"]
    assert evidence[0]["source"].startswith(sims["preempting"] + " #1") and evidence[0]["line"] > 0
    assert evidence[-1]["source"].startswith(sims["preempting"] + " #3")
    assert "scrape clock" in data["facts"]["metrics_window_seconds"]["note"]
    assert len(data["timeline"]) == 3 and data["timeline"][1]["preemptions"] > 0


def test_one_live_scrape_turns_the_lifetime_count_into_a_rate(sims):
    """One scrape: its clock minus the counters' _created time is the server's uptime, so the lifetime
    preemption count becomes an average rate; a healthy server's zero stays healthy."""
    code, data = _json("--metrics-url", sims["preempting"], "--samples", "1")
    facts = data["facts"]
    assert code == 1 and (data["verdict"], data["rule_path"][-1]) == ("preemption_slowdown", "preemption-rate")
    assert "preemptions" not in facts and facts["preemptions_since_start"]["value"] > 0
    assert "_created" in facts["server_uptime_seconds"]["note"] and facts["server_uptime_seconds"]["value"] > 0
    assert "since the server started" in facts["preemption_rate_per_min"]["note"]
    code, data = _json("--metrics-url", sims["healthy"], "--samples", "1")
    assert code == 0 and data["verdict"] == "healthy" and data["facts"]["preemption_rate_per_min"]["value"] == 0


def test_scraping_stops_before_the_samples_held_pass_the_ceiling(sims, monkeypatch):
    """Every sample is held until the facts are made: a round that would pass MAX_SAMPLES_HELD is not
    taken, a warning says so, the rounds taken are kept and the countdown line is cleared."""
    from triage.metrics import inputs, parse
    from triage.metrics.httpget import HttpOptions
    one = len(inputs.read_urls([sims["healthy"]], 1, 0.1, HttpOptions()).samples)
    monkeypatch.setattr(parse, "MAX_SAMPLES_HELD", 2 * one + one // 2)
    shown: list[tuple[int, int]] = []
    read = inputs.read_urls([sims["healthy"]], 5, 0.1, HttpOptions(), lambda taken, count, left: shown.append(
        (taken, count)))
    assert len({s.scrape for s in read.samples}) == 2 and shown[-1] == (2, 2)
    assert read.warnings and "stopped after 2 of 5 rounds" in read.warnings[0]
    assert read.inputs[0].path.endswith("(2 scrape(s) 0.1 s apart)")


def test_healthy_server(sims):
    code, data = _json("--metrics-url", sims["healthy"], *FAST)
    assert code == 0 and data["verdict"] == "healthy"
    assert data["facts"]["preemptions"]["value"] == 0 and data["facts"]["kv_cache_usage_max"]["value"] < 0.5


def test_saturating_server_without_a_preemption_counter(sims):
    """V1 0.7/0.8 names (gpu_cache_usage_perc) and no preemption metric: a full cache with a queue."""
    code, data = _json("--metrics-url", sims["saturating"], *FAST)
    assert code == 1 and (data["verdict"], data["confidence"]) == ("preemption_slowdown", "medium")
    assert data["rule_path"][-1] == "kv-saturated-queueing" and "preemptions" not in data["facts"]


def test_v0_server(sims):
    code, data = _json("--metrics-url", sims["v0"], *FAST)
    assert data["verdict"] == "preemption_slowdown" and data["facts"]["engine"]["value"] == "v0"
    assert "swapped_max" in data["facts"]


def test_gpu_exporter_alongside_the_server(sims):
    code, data = _json("--metrics-url", sims["healthy"], "--metrics-url", sims["dcgm"], *FAST)
    assert code == 1 and data["verdict"] == "external_pressure"
    assert data["facts"]["gpu_memory_beyond_budget_gib"]["value"] == pytest.approx(6.0, abs=0.3)
    assert [i["path"].split(" (")[0] for i in data["inputs"]] == [sims["healthy"], sims["dcgm"]]


def test_log_and_live_metrics_join(sims):
    log = FIXTURES / "incidents" / "v1-0.10.1-silent-preemption" / "server.log"
    code, data = _json(str(log), "--metrics-url", sims["preempting"], *FAST)
    assert data["verdict"] == "preemption_slowdown"
    sources = {e["source"] for e in data["findings"][0]["evidence"]}
    assert str(log) in sources and any(s.startswith(sims["preempting"]) for s in sources)


def test_bearer_token_from_header_or_vllm_api_key(sims):
    err = _error("--metrics-url", sims["token"], "--samples", "1")
    assert "HTTP 401" in err and "--header 'Authorization: Bearer TOKEN'" in err and "VLLM_API_KEY" in err
    assert _json("--metrics-url", sims["token"], "--samples", "1",
                 "--header", "Authorization: Bearer s3cr3t-t0ken-abcdef")[1]["verdict"] == "healthy"
    code, data = _json("--metrics-url", sims["token"], "--samples", "1", env={"VLLM_API_KEY": "s3cr3t-t0ken-abcdef"})
    assert data["verdict"] == "healthy" and "s3cr3t" not in json.dumps(data)


def test_no_countdown_when_stderr_is_not_a_terminal(sims):
    result = run_cli("--metrics-url", sims["healthy"], *FAST)
    assert result.returncode == 0 and result.stderr == b""


def test_countdown_on_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    screen = Tty()
    monkeypatch.setattr(cli.sys, "stderr", screen)
    show = cli._countdown()
    show(1, 3, 4.2)
    show(3, 3, 0.0)
    text = screen.getvalue()
    assert "scraped 1 of 3, next in 4 s" in text and text.endswith("\r")


# --- a wrong endpoint: one line, the URL, a hint, exit 2 -----------------------------------------------

def test_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = _error("--metrics-url", f"http://127.0.0.1:{port}/metrics")
    assert f"http://127.0.0.1:{port}/metrics: connection refused" in err and "kubectl port-forward" in err


def test_connect_timeout():
    """A listener whose backlog is full drops new connections: the connect timeout fires."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    pending = []
    try:
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            pending.append(c)
        time.sleep(0.1)
        err = _error("--metrics-url", f"http://127.0.0.1:{port}/metrics", "--connect-timeout", "0.5")
        assert "no connection within 0.5 s" in err and "--connect-timeout" in err
    finally:
        for c in pending:
            c.close()
        server.close()


def test_read_timeout(sims):
    err = _error("--metrics-url", sims["slow"], "--read-timeout", "0.5", "--samples", "1")
    assert f"{sims['slow']}: connected, but no answer within 0.5 s" in err and "--read-timeout" in err


@pytest.mark.parametrize("name,path,needle", [
    ("healthy", "/v1/metrics", "HTTP 404 Not Found"),
    ("forbidden", "/metrics", "HTTP 403 Forbidden"),
    ("html", "/metrics", "answered with an HTML page, not Prometheus metrics"),
    ("json", "/metrics", "answered with JSON, not Prometheus metrics text"),
    ("garbage", "/metrics", "answered with something that is not Prometheus metrics"),
])
def test_wrong_answers(sims, name, path, needle):
    url = sims[name].rsplit("/metrics", 1)[0] + path
    err = _error("--metrics-url", url, "--samples", "1")
    assert err.startswith(f"vtriage: error: {url}: {needle}"), err


def test_url_credentials_never_shown(sims):
    url = sims["garbage"].replace("http://", "http://admin:hunter22@")
    err = _error("--metrics-url", url, "--samples", "1")
    assert "hunter22" not in err and "admin" not in err


def test_not_a_url_and_bad_header():
    assert "is not an http:// or https:// URL" in _error("--metrics-url", "localhost:8000/metrics")
    assert "is not 'Name: value'" in _error("--metrics-url", "http://127.0.0.1:9/metrics", "--header", "Bearer x")


# --- TLS ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls_sim(tmp_path_factory):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    folder = tmp_path_factory.mktemp("tls")
    ca_file, chain, key = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.cert_chain_pems[0].write_to_path(str(chain))
    cert.private_key_pem.write_to_path(str(key))
    sim = start_sim("healthy", "--certfile", str(chain), "--keyfile", str(key))
    try:
        yield f"https://127.0.0.1:{sim.port}/metrics", str(ca_file)
    finally:
        sim.stop()


def test_tls_is_verified_by_default(tls_sim):
    url, ca_file = tls_sim
    err = _error("--metrics-url", url, "--samples", "1")
    assert "TLS certificate verification failed" in err and "--ca-cert" in err and "--insecure" in err
    assert _json("--metrics-url", url, "--samples", "1", "--ca-cert", ca_file)[1]["verdict"] == "healthy"
    assert _json("--metrics-url", url, "--samples", "1", "--insecure")[1]["verdict"] == "healthy"
    assert "contradict" in _error("--metrics-url", url, "--insecure", "--ca-cert", ca_file, hint=False)
