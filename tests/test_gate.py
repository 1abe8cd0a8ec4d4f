"""--fail-on and --quiet: the exit code as a CI or runbook gate; unchanged when neither is given."""
from __future__ import annotations

import pytest

from conftest import FIXTURES, run_cli

KV = str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")
PREEMPTING = str(FIXTURES / "logs" / "v1" / "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")
HEALTHY = str(FIXTURES / "logs" / "v1" / "healthy-qwen3-8b-h200-033-tty-colour-logo.log")
NOTHING = str(FIXTURES / "logs" / "v0-late" / "inconclusive-nginx-ingress-502s-no-vllm-output.log")


@pytest.mark.parametrize("log,plain", [(KV, 1), (PREEMPTING, 1), (HEALTHY, 0), (NOTHING, 3)])
def test_exit_codes_are_unchanged_without_the_flags_and_quiet_prints_nothing(log, plain):
    assert run_cli(log).returncode == plain
    quiet = run_cli(log, "--quiet")
    assert quiet.returncode == plain and quiet.stdout == b"" and quiet.stderr == b""


@pytest.mark.parametrize("fail_on,expected", [
    # severity: that severity or worse
    ("critical", {KV: 1, PREEMPTING: 0, HEALTHY: 0, NOTHING: 0}),
    ("warning", {KV: 1, PREEMPTING: 1, HEALTHY: 0, NOTHING: 0}),
    ("info", {KV: 1, PREEMPTING: 1, HEALTHY: 0, NOTHING: 1}),
    # verdict classes, comma-separated
    ("preemption_slowdown", {KV: 0, PREEMPTING: 1, HEALTHY: 0, NOTHING: 0}),
    ("kv_cache_too_small,inconclusive", {KV: 1, PREEMPTING: 0, HEALTHY: 0, NOTHING: 1}),
])
def test_fail_on_gates_by_verdict_or_severity(fail_on, expected):
    got = {log: run_cli(log, "--fail-on", fail_on, "-q").returncode for log in expected}
    assert got == expected


def test_fail_on_repeats_and_still_prints_the_report():
    result = run_cli(PREEMPTING, "--fail-on", "weights_dont_fit", "--fail-on", "warning")
    assert result.returncode == 1 and b"PREEMPTION SLOWDOWN" in result.stdout


def test_fail_on_unknown_value_is_a_usage_error_before_reading_anything():
    result = run_cli("/nonexistent.log", "--fail-on", "warnin")
    err = result.stderr.decode()
    assert result.returncode == 2 and "did you mean 'warning'" in err and err.count("\n") == 1


def test_quiet_still_writes_the_output_file(tmp_path):
    target = tmp_path / "r.json"
    result = run_cli(KV, "-q", "--format", "json", "-o", str(target))
    assert result.returncode == 1 and result.stdout == b"" and '"verdict": "kv_cache_too_small"' in target.read_text()


def test_quiet_keeps_errors_on_stderr():
    result = run_cli("/nonexistent.log", "-q")
    assert result.returncode == 2 and b"no such file" in result.stderr
