"""Fixes that fit the incident (issue 31): sized from its own load, vLLM's own remedy and figures first, flags of
its own release, checked before unchecked, and sentences a tired reader cannot misread."""
from __future__ import annotations

import json

from conftest import FIXTURES, run_cli

LOGS = FIXTURES / "logs"
TWO_LONG = LOGS / "v1" / "preemption_slowdown-qwen25-14b-awq-l4-0111-two-long-requests-fill-the-cache.log"
OLD_NO_VERSION = LOGS / "v0-old" / "kv_cache_too_small-mistral-7b-02x-no-version-max-seq-len-check.log"
ROUNDED = LOGS / "v1" / "kv_cache_too_small-qwen3-4b-gfx1151-rocm-estimate-beats-rounded-gib.log"
NO_LENGTH = LOGS / "v1" / "kv_cache_too_small-unknown-model-0102-no-cache-blocks-excerpt-no-length.log"
NEGATIVE_KV = LOGS / "v1" / "kv_cache_too_small-qwen25-32b-awq-l40s-0101-negative-available-kv-compose-cut.log"
RESTARTS = LOGS / "v1" / "kv_cache_too_small-llama31-8b-a10g-restarts-after-free-mem-failures.log"


def _report(*args: object) -> dict:
    return json.loads(run_cli(*map(str, args), "--format", "json").stdout)


def _text(*args: object) -> str:
    return run_cli(*map(str, args)).stdout.decode()


def _numbered(report: dict) -> list[dict]:
    return [f for f in report["fixes"] if f["status"] != "not_enough"]


def test_a_cache_that_holds_two_requests_is_not_capped_below_what_ran():
    report = _report(TWO_LONG)
    assert report["verdict"] == "preemption_slowdown"
    numbered = _numbered(report)
    assert numbered[0]["flag"] in ("--gpu-memory-utilization", "--kv-cache-dtype")       # more KV first
    assert not any(f["flag"] == "--max-num-seqs" and f["value"] is not None and f["value"] < 2 for f in numbered)
    cap = next(f for f in report["fixes"] if f["action"] == "Lowering --max-num-seqs")
    assert cap["status"] == "not_enough" and cap["why"].startswith("2 requests ran without filling the cache")
    util = next(f for f in numbered if f["flag"] == "--gpu-memory-utilization")
    assert util["value"] == 0.95 and util["status"] == "checked"
    assert "combine with --max-num-seqs" in util["predicted"]["summary"]


def test_a_max_num_seqs_fix_is_sized_from_the_load_and_says_what_it_costs():
    report = _report(LOGS / "v1" / "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")
    seqs = next(f for f in report["fixes"] if f["flag"] == "--max-num-seqs" and f["value"])
    tokens, per_request = seqs["predicted"]["kv_cache_tokens"], seqs["predicted"]["tokens_per_request"]
    assert seqs["value"] == int(0.9 * tokens / per_request)
    assert seqs["value"] >= report["facts"]["running_below_saturation"]["value"]
    assert "it costs throughput" in seqs["why"] and "of that batch" in seqs["why"]
    flags = [f["flag"] for f in _numbered(report)]
    assert flags.index("--kv-cache-dtype") < flags.index("--max-num-seqs") < flags.index("--tensor-parallel-size")


def test_vllm_s_own_estimate_is_checked_not_refuted_by_rounded_gib():
    report = _report(ROUNDED)
    first = report["fixes"][0]
    assert first["action"] == "--max-model-len 127776" and first["status"] == "checked"
    assert any(f["flag"] == "--gpu-memory-utilization" for f in _numbered(report))


def test_vllm_s_own_remedy_is_offered_without_a_length_or_a_gpu_total():
    report = _report(NO_LENGTH)
    util = next(f for f in report["fixes"] if f["flag"] == "--gpu-memory-utilization")
    assert util["status"] == "unchecked" and util["why"].startswith("vLLM's own remedy")
    assert "1.37 GiB short of any KV cache" in util["why"]


def test_a_log_in_0_2_wording_gets_no_flag_that_release_lacks():
    report = _report(OLD_NO_VERSION)
    assert report["facts"]["release_band"]["value"] == "v0-old"
    assert not any(f["flag"] == "--kv-cache-dtype" for f in report["fixes"])
    assert not any(f["flag"] == "--quantization" and f["value"] == "fp8" for f in report["fixes"])
    assert report["launch"]["release_basis"].startswith("vLLM 0.2.0 (the log names no version: the oldest "
                                                         "release of v0-old")
    assert report["fixes"][0]["action"] == "--max-model-len 20480"


def test_a_lever_that_cannot_help_is_listed_apart_and_never_numbered():
    text = _text(NEGATIVE_KV)
    fixes, short = text.split("Not enough alone", 1)
    assert "Lowering --max-model-len" not in fixes
    assert "- Lowering --max-model-len: no length fits" in short
    report = _report(NEGATIVE_KV)
    statuses = [f["status"] for f in report["fixes"]]
    assert all(status == "not_enough" for status in statuses[statuses.index("not_enough"):])


def test_an_input_with_no_vllm_output_blames_no_engine(tmp_path):
    log = tmp_path / "wrapper.log"
    log.write_text('Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n'
                   "RuntimeError: engine failed\n")
    text = _text(log)
    assert "Nothing in the input is vLLM's own output" in text and "another program's" in text
    assert "The engine failed" not in text and "Ruled out" not in text
    gated = run_cli(str(log), "--fail-on", "warning")
    assert gated.returncode == 3


def test_every_startup_of_a_restarting_server_is_named():
    text = _text(RESTARTS)
    assert "Restarts:   3 startups in this input: 1-2 ended as external_pressure, 3 ended as" in text
