"""`vtriage diff`: did the fix work? Verdicts, KV headroom, preemption, concurrency and the settings
that changed, side by side, from two real runs of one server."""
from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import FIXTURES, run_cli
from test_docs import SCHEMA

BEFORE = FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log"
PREEMPTING = str(FIXTURES / "logs" / "v1" / "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")

# What vLLM 0.10.2 prints after the KV cache is sized, the server starts and serves (formats as in
# sections 3.3, 3.5, 3.6 and 5.4 of the team's notes on vLLM's log formats).
_STARTED = """\
2025-09-24T08:20:33.854593151Z (EngineCore_DP0 pid=281) INFO 09-24 08:20:33 [kv_cache_utils.py:864] GPU KV cache size: 75,440 tokens
2025-09-24T08:20:33.854600000Z (EngineCore_DP0 pid=281) INFO 09-24 08:20:33 [kv_cache_utils.py:868] Maximum concurrency for 65,536 tokens per request: 1.15x
2025-09-24T08:20:41.102000000Z (EngineCore_DP0 pid=281) INFO 09-24 08:20:41 [gpu_model_runner.py:3118] Graph capturing finished in 8 secs, took 0.53 GiB
2025-09-24T08:20:41.120000000Z (EngineCore_DP0 pid=281) INFO 09-24 08:20:41 [core.py:218] init engine (profile, create kv cache, warmup model) took 36.48 seconds
2025-09-24T08:20:42.001000000Z (APIServer pid=1) INFO 09-24 08:20:42 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000
2025-09-24T08:20:42.410000000Z (APIServer pid=1) INFO:     Application startup complete.
2025-09-24T08:21:12.500000000Z (APIServer pid=1) INFO 09-24 08:21:12 [loggers.py:123] Engine 000: Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 96.1 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 12.5%
2025-09-24T08:21:22.500000000Z (APIServer pid=1) INFO 09-24 08:21:22 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 104.7 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 43.0%, Prefix cache hit rate: 12.5%
"""  # noqa: E501 - log lines as vLLM prints them


@pytest.fixture
def after(tmp_path):
    """The same server restarted with --max-model-len 65536: its startup up to the KV sizing, then it serves."""
    lines = BEFORE.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "Available KV cache memory" in line) + 1
    path = tmp_path / "after.log"
    path.write_text("".join(line.replace("131072", "65536") for line in lines[:cut]) + _STARTED)
    return str(path)


def test_a_fix_that_worked(after):
    result = run_cli("diff", str(BEFORE), after)
    out = result.stdout.decode()
    assert result.returncode == 0
    assert out.startswith("FIXED: kv_cache_too_small -> healthy\n\n")      # one server: no warning
    assert "  max_model_len              131072 tokens -> 65536 tokens" in out
    assert "kv_cache_tokens            unknown                75440 tokens           only AFTER shows it" in out
    assert "max_concurrency            unknown                1.15x" in out
    assert "Settings the same: vllm_version, engine, model, gpu_memory_utilization" in out


def test_the_other_way_round_is_a_regression_and_exits_like_the_after_log(after):
    result = run_cli("diff", after, str(BEFORE))
    out = result.stdout.decode()
    assert result.returncode == 1 and out.startswith("REGRESSED: healthy -> kv_cache_too_small\n")
    nxt = next(line for line in out.splitlines() if line.startswith("Next fix for AFTER: "))
    assert nxt.startswith("Next fix for AFTER: vllm serve Qwen/Qwen2.5-7B-Instruct ") and "--hf-overrides" in nxt
    assert nxt.endswith(" --max-model-len 75440")
    assert "Runbook: docs/runbooks/kv_cache_too_small.md" in out


def test_json_has_each_side_and_the_rows(after):
    data = json.loads(run_cli("diff", "--format", "json", str(BEFORE), after).stdout)
    jsonschema.validate(data["before"], SCHEMA)
    jsonschema.validate(data["after"], SCHEMA)
    assert data["outcome"] == "fixed" and data["before"]["verdict"] == "kv_cache_too_small"
    assert data["after"]["verdict"] == "healthy"
    row = next(r for r in data["settings_changed"] if r["fact"] == "max_model_len")
    assert (row["before"], row["after"], row["change"]) == (131072, 65536, "changed")
    kv = {r["fact"]: r for r in data["sections"]["KV headroom"]}
    assert kv["kv_cache_usage_max"]["after"] == pytest.approx(0.43) and kv["kv_cache_gib"]["change"] == "same"


def test_sets_of_files_per_side_and_unchanged_runs():
    result = run_cli("diff", "--before", PREEMPTING, "--after", PREEMPTING)
    out = result.stdout.decode()
    assert result.returncode == 1 and out.startswith("NOT FIXED: still preemption_slowdown\n")
    assert "preemption_rate_per_min    75.85 per minute" in out and "Settings changed: none the logs show" in out


@pytest.mark.parametrize("args,needle", [
    ([PREEMPTING], "diff compares two logs"),
    ([PREEMPTING, PREEMPTING, PREEMPTING], "diff compares two logs"),
    (["--before", PREEMPTING], "needs both sides"),
    ([PREEMPTING, PREEMPTING, "--after", PREEMPTING], "not both"),
    (["-", "-"], "stdin (-) can be given only once"),
    ([PREEMPTING, "/nonexistent.log"], "no such file"),
])
def test_diff_usage_errors(args, needle):
    result = run_cli("diff", *args)
    err = result.stderr.decode()
    assert result.returncode == 2 and needle in err and err.count("\n") == 1


def test_two_different_deployments_are_not_called_fixed_without_a_warning():
    """A healthy Qwen3-8B on 0.33 is not the Qwen2.5-7B on 0.10.2 fixed: say so under the headline."""
    other = str(FIXTURES / "logs" / "v1" / "healthy-qwen3-8b-h200-033-tty-colour-logo.log")
    result = run_cli("diff", str(BEFORE), other)
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "FIXED: kv_cache_too_small -> healthy"
    assert lines[1].startswith("warning: BEFORE and AFTER look like different deployments (model "
                               "Qwen/Qwen2.5-7B-Instruct vs Qwen/Qwen3-8B; vLLM version 0.10.2 vs 0.33.0)")
    data = json.loads(run_cli("diff", "--format", "json", str(BEFORE), other).stdout)
    assert len(data["warnings"]) == 1 and "different deployments" in data["warnings"][0]
    same = json.loads(run_cli("diff", "--format", "json", PREEMPTING, PREEMPTING).stdout)
    assert same["warnings"] == []
