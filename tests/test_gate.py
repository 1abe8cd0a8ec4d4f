"""--fail-on and --quiet: the exit code as a CI or runbook gate; unchanged when neither is given.
A gate never goes green on input it cannot judge: empty, or not vLLM's."""
from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, json_report, run_cli

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
    # (a log with no vLLM output keeps 3 unless the policy names inconclusive)
    ("critical", {KV: 1, PREEMPTING: 0, HEALTHY: 0, NOTHING: 3}),
    ("warning", {KV: 1, PREEMPTING: 1, HEALTHY: 0, NOTHING: 3}),
    ("info", {KV: 1, PREEMPTING: 1, HEALTHY: 0, NOTHING: 1}),
    # verdict classes, comma-separated, in any case
    ("preemption_slowdown", {KV: 0, PREEMPTING: 1, HEALTHY: 0, NOTHING: 3}),
    ("kv_cache_too_small,inconclusive", {KV: 1, PREEMPTING: 0, HEALTHY: 0, NOTHING: 1}),
    ("KV_Cache_Too_Small,Warning", {KV: 1, PREEMPTING: 1, HEALTHY: 0, NOTHING: 3}),
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


@pytest.mark.parametrize("how", ["empty file", "empty stdin", "text on stdin", "another program's log"])
def test_a_gate_never_passes_on_input_it_cannot_judge(tmp_path, how):
    """`kubectl logs` failed or picked the wrong container: the runbook gate must not go green."""
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    args, stdin = {"empty file": ([str(empty)], None), "empty stdin": (["-"], b""),
                   "text on stdin": (["-"], b"hello\n"), "another program's log": ([NOTHING], None)}[how]
    gated = run_cli("--fail-on", "critical", *args, stdin=stdin)
    assert gated.returncode == 3 and b"INCONCLUSIVE" in gated.stdout
    err = gated.stderr.decode()
    assert err.count("\n") == 1 and "cannot pass" in err and "--allow-empty" in err
    assert run_cli("--fail-on", "critical", "-q", *args, stdin=stdin).returncode == 3
    # opting in: judged by the policy, which either lets inconclusive pass or names it
    assert run_cli("--fail-on", "critical", "--allow-empty", "-q", *args, stdin=stdin).returncode == 0
    assert run_cli("--fail-on", "critical,inconclusive", "-q", *args, stdin=stdin).returncode == 1


def test_allow_empty_without_a_gate_is_a_usage_error():
    result = run_cli("--allow-empty", KV)
    assert result.returncode == 2 and b"needs --fail-on" in result.stderr and result.stderr.count(b"\n") == 1


def test_empty_input_rules_nothing_out_every_class_is_not_assessed(tmp_path):
    """An empty log knows nothing about the weights: it must not say "weights_dont_fit: nothing failed"."""
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    code, data = json_report(str(empty))
    assert code == 3 and data["ruled_out"] == []
    assert {n["verdict"] for n in data["not_assessed"]} == {"weights_dont_fit", "kv_cache_too_small",
                                                             "external_pressure", "preemption_slowdown",
                                                             "other_failure", "healthy"}
    text = run_cli(str(empty)).stdout.decode()
    assert "Ruled out" not in text and "Not assessed" in text and "nothing failed" not in text


def test_a_serving_log_still_rules_classes_out_by_its_evidence():
    code, data = json_report(HEALTHY)
    ruled = {r["verdict"]: r for r in data["ruled_out"]}
    assert code == 0 and set(ruled) == {"weights_dont_fit", "kv_cache_too_small", "external_pressure",
                                        "preemption_slowdown", "other_failure"}
    assert all(r["facts"] and r["evidence"] for r in ruled.values()), json.dumps(ruled, indent=1)
