"""`vtriage alerts`: rules Prometheus accepts (`promtool check rules`), with the metric names of the
vLLM version in the log, that fire on the incident's own figures (`promtool test rules`)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from triage.alerts import KV_NEW, KV_OLD, PREEMPTIONS, metric_names, to_yaml
from triage.vocabulary import KV_SATURATED

from conftest import FIXTURES, diagnose_files, run_cli

LOGS = FIXTURES / "logs"
PREEMPTING = LOGS / "v1" / "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log"


@pytest.fixture(scope="session")
def promtool():
    found = shutil.which("promtool")
    if found:
        return found
    if os.environ.get("VTRIAGE_REQUIRE_SERVICES") == "1":
        pytest.fail("promtool is required (VTRIAGE_REQUIRE_SERVICES=1): apt-get install prometheus")
    pytest.skip("promtool not installed (apt-get install prometheus); VTRIAGE_REQUIRE_SERVICES=1 makes this a failure")


def _promtool(promtool, *args, cwd):
    result = subprocess.run([promtool, *args], check=False, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _alerts(*args) -> str:
    result = run_cli("alerts", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


@pytest.mark.parametrize("version,engine,kv,preempt", [
    ("0.2.7", None, (KV_OLD,), None),                 # before vllm:num_preemptions_total existed (0.4.3)
    ("0.6.3", "v0", (KV_OLD,), PREEMPTIONS),
    ("0.7.3", "v1", (KV_OLD,), None),                 # V1 0.7.x: no preemption metric
    ("0.9.1", "v1", (KV_OLD,), PREEMPTIONS),          # kv_cache_usage_perc arrives in 0.9.2
    ("0.10.2", "v0", (KV_OLD,), PREEMPTIONS),         # the V0 engine never had the new name
    ("0.10.2", "v1", (KV_NEW,), PREEMPTIONS),
    ("0.10.2", None, (KV_NEW, KV_OLD), PREEMPTIONS),  # engine unknown: either may be there
    ("0.13.0", None, (KV_NEW,), PREEMPTIONS),         # gpu_cache_usage_perc removed in 0.12
    (None, None, (KV_NEW, KV_OLD), PREEMPTIONS),
])
def test_metric_names_follow_the_version(version, engine, kv, preempt):
    names = metric_names(version, engine)
    assert (names.kv_usage, names.preemptions) == (kv, preempt)


@pytest.mark.parametrize("log,present,absent", [
    ("v1/preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log", KV_NEW, KV_OLD),     # 0.20.2 V1
    ("v1/kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log", KV_NEW, KV_OLD),        # 0.10.2 V1
    ("v1/preemption_slowdown-llama31-8b-4090-091-kv99-waiting-grows.log.bz2", KV_OLD, KV_NEW),  # 0.9.1 V1
    ("v0-late/healthy-phi4-mini-l40s-085-v0-single-preemption.log", KV_OLD, KV_NEW),        # 0.8.5 V0
])
def test_the_logs_version_picks_the_names(log, present, absent):
    text = _alerts("--format", "rules", str(LOGS / log))
    assert f"({present}" in text and f"({absent}" not in text
    assert "# vLLM version read from the log" in text


@pytest.mark.parametrize("args", [
    [], ["--vllm-version", "0.2.7"], ["--vllm-version", "0.6.3", "--engine", "v0"],
    ["--vllm-version", "0.7.3", "--engine", "v1"], ["--namespace", "llm", "--container", "vllm|server"],
    [str(PREEMPTING)], [str(LOGS / "v0-old" / "weights_dont_fit-yi-34b-a6000-container-own-pid.log")],
])
def test_promtool_accepts_both_formats(promtool, tmp_path, args):
    plain = tmp_path / "rules.yaml"
    plain.write_text(_alerts("--format", "rules", *args))
    assert "SUCCESS" in _promtool(promtool, "check", "rules", str(plain), cwd=tmp_path)
    crd = yaml.safe_load(_alerts(*args))
    assert crd["apiVersion"] == "monitoring.coreos.com/v1" and crd["kind"] == "PrometheusRule"
    assert crd["spec"] == yaml.safe_load(plain.read_text())      # the CRD's spec is the same rules file
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(crd["spec"]))
    assert "SUCCESS" in _promtool(promtool, "check", "rules", str(spec_file), cwd=tmp_path)


def test_prometheusrule_metadata_namespace_and_labels():
    crd = yaml.safe_load(_alerts("--namespace", "llm", "--label", "release=kube-prometheus-stack", str(PREEMPTING)))
    meta = crd["metadata"]
    assert meta["name"] == "vllm-vtriage" and meta["namespace"] == "llm"
    assert meta["labels"]["release"] == "kube-prometheus-stack"
    exprs = [r["expr"] for r in crd["spec"]["groups"][0]["rules"]]
    assert all('namespace="llm"' in e for e in exprs)
    first = crd["spec"]["groups"][0]["rules"][0]
    assert first["alert"] == "VLLMKVCacheNearlyFull"          # the ones that catch the diagnosed verdict lead
    assert first["annotations"]["runbook_url"] == "docs/runbooks/preemption_slowdown.md"      # the docs path by default
    assert first["annotations"]["description"].endswith("Runbook: vtriage explain preemption_slowdown.")
    assert all("runbook" not in r["annotations"] for r in crd["spec"]["groups"][0]["rules"])  # runbook_url only


def _series(facts, minutes=30):
    """Input series shaped like the incident: its KV peak, its preemption rate, its queue growing to its max."""
    labels = '{pod="vllm-0",namespace="llm",model_name="Qwen/Qwen3-32B",engine="0"}'
    kv = facts["kv_cache_usage_max"].value
    per_min = round(facts["preemption_rate_per_min"].value)
    step = max(1, facts["waiting_max"].value // minutes)
    return [{"series": f"{KV_NEW}{labels}", "values": f"{kv}x{minutes}"},
            {"series": f"{PREEMPTIONS}{labels}", "values": f"0+{per_min}x{minutes}"},
            {"series": f"vllm:num_requests_waiting{labels}", "values": f"0+{step}x{minutes}"},
            {"series": 'kube_pod_container_status_restarts_total{pod="vllm-0",namespace="llm",container="vllm"}',
             "values": "0x5 1x5 2x5 3x15"}]


def _expected(rules, name, labels):
    rule = next(r for r in rules if r["alert"] == name)
    return rule, {"exp_labels": {"severity": rule["labels"]["severity"], **labels}}


def test_the_alerts_fire_on_this_incidents_figures_and_not_on_a_healthy_server(promtool, tmp_path, kit):
    facts = diagnose_files(kit, PREEMPTING).diagnosis.facts
    (tmp_path / "rules.yaml").write_text(_alerts("--format", "rules", str(PREEMPTING)))
    rules = yaml.safe_load((tmp_path / "rules.yaml").read_text())["groups"][0]["rules"]
    who = {"pod": "vllm-0", "namespace": "llm", "model_name": "Qwen/Qwen3-32B"}
    tests = []
    for name in ("VLLMKVCacheNearlyFull", "VLLMPreempting", "VLLMRequestsQueueing"):
        _, expected = _expected(rules, name, who)
        tests.append({"eval_time": "25m", "alertname": name, "exp_alerts": [expected]})
    _, restart = _expected(rules, "VLLMContainerRestarting", {"pod": "vllm-0", "namespace": "llm", "container": "vllm"})
    tests.append({"eval_time": "12m", "alertname": "VLLMContainerRestarting", "exp_alerts": [restart]})
    tests.append({"eval_time": "5m", "alertname": "VLLMKVCacheNearlyFull", "exp_alerts": []})   # not yet 10m
    calm = [{"series": f'{KV_NEW}{{pod="vllm-1"}}', "values": "0.41x30"},
            {"series": f'{PREEMPTIONS}{{pod="vllm-1"}}', "values": "0x30"},
            {"series": 'vllm:num_requests_waiting{pod="vllm-1"}', "values": "0x30"}]
    quiet = [{"eval_time": "25m", "alertname": name, "exp_alerts": []}
             for name in ("VLLMKVCacheNearlyFull", "VLLMPreempting", "VLLMRequestsQueueing")]
    for case in tests:     # promtool compares annotations too: expect the rendered ones
        for alert in case["exp_alerts"]:
            alert["exp_annotations"] = _annotations(rules, case["alertname"], facts, alert["exp_labels"])
    # a server outside Kubernetes has no pod label: the alert names its scrape target instead
    bare = {"instance": "10.0.0.7:8000", "model_name": "m"}
    outside = [{"series": f'{KV_NEW}{{instance="10.0.0.7:8000",model_name="m"}}', "values": "0.99x30"}]
    kv_rule = next(r for r in rules if r["alert"] == "VLLMKVCacheNearlyFull")
    named = [{"eval_time": "25m", "alertname": "VLLMKVCacheNearlyFull", "exp_alerts": [{
        "exp_labels": {"severity": "warning", **bare},
        "exp_annotations": {"summary": f"vLLM KV cache above {KV_SATURATED:.0%} on 10.0.0.7:8000",
                            "description": kv_rule["annotations"]["description"]
                            .replace("{{ $labels.model_name }}", "m")
                            .replace("{{ $value | humanizePercentage }}", "99%"),
                            "runbook_url": "docs/runbooks/preemption_slowdown.md"}}]}]
    unit = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": _series(facts), "alert_rule_test": tests},
                      {"interval": "1m", "input_series": calm, "alert_rule_test": quiet},
                      {"interval": "1m", "input_series": outside, "alert_rule_test": named}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(unit, sort_keys=False))
    assert "SUCCESS" in _promtool(promtool, "test", "rules", "test.yaml", cwd=tmp_path)


def _annotations(rules, name, facts, labels):
    """The annotation texts Prometheus renders, computed independently of the templates' engine."""
    rule = next(r for r in rules if r["alert"] == name)
    value = {"VLLMKVCacheNearlyFull": f"{facts['kv_cache_usage_max'].value * 100:.4g}%",
             "VLLMPreempting": f"{round(facts['preemption_rate_per_min'].value):g}",
             "VLLMRequestsQueueing": None, "VLLMContainerRestarting": "2"}[name]   # 0 -> 2 restarts by 12m
    who = f"pod {labels['pod']} in {labels['namespace']}"     # readable, never "vllm-0llm" run together
    out = {"summary": {"VLLMKVCacheNearlyFull": f"vLLM KV cache above {KV_SATURATED:.0%} on {who}",
                       "VLLMPreempting": f"vLLM is preempting requests on {who}",
                       "VLLMRequestsQueueing": f"vLLM request queue growing on {who}",
                       "VLLMContainerRestarting":
                           f"vLLM container {labels.get('container')} of {who} is restarting"}[name],
           "runbook_url": {"VLLMContainerRestarting": "docs/runbooks/inconclusive.md"}.get(
               name, "docs/runbooks/preemption_slowdown.md")}
    text = rule["annotations"]["description"]
    for label, got in labels.items():
        text = text.replace(f"{{{{ $labels.{label} }}}}", got)
    if value is not None:
        text = text.replace("{{ $value | humanizePercentage }}", value).replace("{{ $value | humanize }}", value)
    out["description"] = text
    if name == "VLLMRequestsQueueing":   # the value is the 5-minute average queue at 25m: 21 steps of 5
        step = max(1, facts["waiting_max"].value // 30)
        avg = sum(step * m for m in range(20, 26)) / 6
        out["description"] = out["description"].replace("{{ $value | humanize }}", f"{avg:g}")
    return out


@pytest.mark.parametrize("text", ["10m", "true", "0.95", "a: b", 'say "hi"', "{{ $labels.pod }}", "Käse", "", "-x",
                                  "1e5", "null", "x\ny"])
def test_the_yaml_writer_round_trips_awkward_strings(text):
    doc = {"k": text, "list": [{"a": text, "b": [1, 2.5, True]}], "empty": {}}
    assert yaml.safe_load(to_yaml(doc)) == doc


def test_runbook_url_from_the_teams_config(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".vtriage.toml").write_text('runbook_url = "https://wiki.example.com/vllm/{verdict}"\n')
    result = run_cli("alerts", str(PREEMPTING), cwd=tmp_path)
    rules = yaml.safe_load(result.stdout)["spec"]["groups"][0]["rules"]
    kv = next(r for r in rules if r["alert"] == "VLLMKVCacheNearlyFull")
    assert kv["annotations"]["runbook_url"] == "https://wiki.example.com/vllm/preemption_slowdown"
    restart = next(r for r in rules if r["alert"] == "VLLMContainerRestarting")   # no crash diagnosed: find out which
    assert restart["annotations"]["runbook_url"] == "https://wiki.example.com/vllm/inconclusive"
    assert "| vtriage -" in restart["annotations"]["description"]
    assert "# runbook_url: https://wiki.example.com/vllm/{verdict}" in result.stdout.decode()


@pytest.mark.parametrize("args,needle", [
    (["--namespace", "LLM_prod"], "not a Kubernetes namespace name"),
    (["--label", "release"], "write KEY=VALUE"),
    (["--container", 'vllm"'], "without quotes"),
    (["--container", "vllm("], "not a regular expression"),
    (["--format", "yaml"], "yaml"),
    (["/nonexistent.log"], "no such file"),
    (["--vllm-version", "latest"], "not a vLLM release like 0.10.2"),
])
def test_bad_alert_options_are_one_line_errors(args, needle):
    result = run_cli("alerts", *args)
    err = result.stderr.decode()
    assert result.returncode == 2 and needle in err and err.count("\n") == 1
