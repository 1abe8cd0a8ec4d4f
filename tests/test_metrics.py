"""Saved /metrics snapshots: parsed with line numbers, every metric name mapped to the same facts."""
from __future__ import annotations

import json

import pytest

from triage.errors import InputError
from triage.metricfacts import extract_metric_facts
from triage.metricparse import parse_exposition

from conftest import FIXTURES, run_cli

METRICS = FIXTURES / "metrics"


def _samples(*names):
    out = []
    for i, name in enumerate(names):
        out.extend(parse_exposition((METRICS / name).read_text(), name, scrape=i))
    return out


def test_samples_carry_their_line():
    samples = _samples("v1-preempting-0.prom")
    usage = next(s for s in samples if s.name == "vllm:kv_cache_usage_perc")
    assert usage.source.line == 9 and usage.value == 0.9912


def test_malformed_file_names_the_line():
    with pytest.raises(InputError) as err:
        parse_exposition((METRICS / "malformed.prom").read_text(), "malformed.prom")
    assert str(err.value).startswith("malformed.prom:4:")


def test_old_and_new_names_give_the_same_facts():
    old = extract_metric_facts(_samples("v0-names-healthy.prom"))
    assert old["kv_cache_usage_max"].value == 0.0821 and old["preemptions"].value == 0
    new = extract_metric_facts(_samples("v1-preempting-0.prom"))
    assert new["kv_cache_usage_max"].value == 0.9912
    assert new["kv_cache_tokens"].value == 15307 * 16
    assert new["gpu_memory_utilization"].value == 0.9


def test_two_snapshots_give_a_delta():
    facts = extract_metric_facts(_samples("v1-preempting-0.prom", "v1-preempting-1.prom"))
    assert facts["preemptions"].value == 18954 - 18211
    assert facts["waiting_max"].value == 93


def test_metrics_alone_give_a_verdict():
    result = run_cli("--format", "json", "--metrics", str(METRICS / "v1-preempting-0.prom"),
                     "--metrics", str(METRICS / "v1-preempting-1.prom"))
    data = json.loads(result.stdout)
    assert data["verdict"] == "preemption_slowdown" and result.returncode == 1
    healthy = run_cli("--metrics", str(METRICS / "v0-names-healthy.prom"))
    assert healthy.returncode == 0 and b"HEALTHY" in healthy.stdout


def test_malformed_metrics_on_the_command_line():
    result = run_cli("--metrics", str(METRICS / "malformed.prom"))
    assert result.returncode == 2
    assert b"malformed.prom:4:" in result.stderr and b"Traceback" not in result.stderr
