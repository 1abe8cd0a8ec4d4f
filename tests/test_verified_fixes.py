"""Every numeric fix is solved through the capacity model, re-checked, and shows what it would do."""
from __future__ import annotations

import tomllib

import pytest

from triage.capacity.model import calibrate
from triage.capacity.predict import predict
from triage.render.text import render_text

from conftest import FIXTURES, diagnose_files

MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]


def report_of(kit, name):
    return diagnose_files(kit, FIXTURES / "logs" / name)


def flag_fix(report, flag):
    return next(f for f in report.diagnosis.fixes if f.flag == flag and f.value is not None)


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_checked_fixes_carry_a_prediction_that_confirms_them(kit, entry):
    report = report_of(kit, entry["file"])
    text = render_text(report)
    for fix in report.diagnosis.fixes:
        if fix.checked and fix.value is not None:
            assert fix.predicted and fix.predicted["summary"], fix
            assert fix.predicted.get("starts") is not False, fix
            assert f"predicted: {fix.predicted['summary'][:40]}" in text.replace("\n     ", " ")
        elif fix.value is not None:
            assert f"{fix.action} (unchecked)" in text


def test_largest_max_model_len_is_the_largest(kit):
    report = report_of(kit, "v0-late/kv_cache_too_small-qwen25-14b-yarn64k-l40s-064-oneliner.log")
    fix = flag_fix(report, "--max-model-len")
    assert fix.checked and fix.predicted["starts"] is True
    g = calibrate(report.diagnosis.facts)
    assert predict(g, g.settings.replace(max_model_len=fix.value + 16)).starts is False


def test_smallest_utilization_for_the_length_is_the_smallest_with_its_margin(kit):
    report = report_of(kit, "v0-late/kv_cache_too_small-qwen25-14b-yarn64k-l40s-064-oneliner.log")
    fix = flag_fix(report, "--gpu-memory-utilization")
    facts = report.diagnosis.facts
    assert fix.checked and fix.predicted["kv_cache_tokens"] >= facts["max_model_len"].value
    g = calibrate(facts)
    assert predict(g, g.settings.replace(gpu_memory_utilization=round(fix.value - 0.02, 2))).starts is False
    assert "predicted: KV" in render_text(report)


def test_largest_utilization_the_free_memory_allows(kit):
    report = report_of(kit, "v1/external_pressure-gemma3-27b-tp2-free-mem-cuda0-worker.log")
    facts = report.diagnosis.facts
    fix = flag_fix(report, "--gpu-memory-utilization")
    total, free = facts["gpu_total_gib"].value, facts["free_gib"].value
    assert fix.value * total <= free - 0.02 * total < (fix.value + 0.01) * total
    assert fix.checked and "weights" in fix.predicted["summary"]       # the log stopped before loading


def test_headroom_fix_predicts_the_smaller_kv_cache(kit):
    report = report_of(kit, "v1/external_pressure-llama31-8b-h100-cudagraph-capture-oom-second-service.log")
    facts = report.diagnosis.facts
    fix = flag_fix(report, "--gpu-memory-utilization")
    shrink = (facts["gpu_memory_utilization"].value - fix.value) * facts["gpu_total_gib"].value
    assert fix.checked
    assert fix.predicted["kv_cache_gib"] == pytest.approx(facts["kv_cache_gib"].value - shrink, abs=0.01)
    assert fix.predicted["kv_cache_tokens"] < facts["kv_cache_tokens"].value


def test_a_fix_the_model_cannot_check_says_what_is_missing(kit):
    report = report_of(kit, "v0-old/external_pressure-llama31-8b-tp2-a10g-serving-oom-logprobs.log")
    fix = flag_fix(report, "--gpu-memory-utilization")
    assert not fix.checked and fix.predicted["unknown"]
    assert "KV bytes per token" in fix.predicted["summary"]
    assert "(unchecked)" in render_text(report)


def test_utilization_the_weights_cannot_fit_in_is_not_offered(kit):
    report = report_of(kit, "v1/external_pressure-mistral-small-24b-a100-free-mem-below-util.log")
    assert not any(f.flag == "--gpu-memory-utilization" for f in report.diagnosis.fixes)
    assert any("cannot help" in f.action for f in report.diagnosis.fixes)


def test_old_v0_fp8_fix_doubles_the_logged_tokens(kit):
    """V0 <= 0.6.3 prints only blocks: the KV memory is unknown, but FP8 still doubles the tokens it holds."""
    report = report_of(kit, "v0-old/kv_cache_too_small-mistral-7b-32k-3090-util085.log")
    fix = flag_fix(report, "--kv-cache-dtype")
    assert fix.checked and fix.predicted["kv_cache_tokens"] == 2 * report.diagnosis.facts["kv_cache_tokens"].value


def test_max_num_seqs_is_sized_from_the_tokens_a_request_held(kit):
    report = report_of(kit, "v1/preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")
    facts = report.diagnosis.facts
    fix = flag_fix(report, "--max-num-seqs")
    per_request = facts["kv_cache_usage_max"].value * facts["kv_cache_tokens"].value / facts["running_at_saturation"].value
    assert fix.value == int(0.9 * facts["kv_cache_tokens"].value / per_request)
    assert fix.checked and fix.predicted["kv_cache_usage"] <= 0.9
