"""Every numeric fix is solved through the capacity model, re-checked, and shows what it would do."""
from __future__ import annotations

import json
import re
import tomllib

import pytest

from triage.capacity.model import calibrate
from triage.capacity.predict import predict
from triage.render.text import render_text

from conftest import FIXTURES, diagnose_files, json_report, run_cli

MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]


def report_of(kit, name):
    return diagnose_files(kit, FIXTURES / "logs" / name)


def flag_fix(report, flag):
    return next(f for f in report.diagnosis.fixes if f.flag == flag and f.value is not None)


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_every_fix_says_what_the_model_made_of_it_and_only_a_checked_one_leads(kit, entry):
    report = report_of(kit, entry["file"])
    text = render_text(report)
    flat = text.replace("\n     ", " ")
    short_at = text.find("Not enough alone")
    for number, fix in enumerate(report.diagnosis.fixes, 1):
        assert fix.status in ("checked", "unchecked", "not_enough", "advice")
        assert fix.checked == (fix.status == "checked")
        if fix.status == "checked" and fix.value is not None:
            assert fix.predicted and fix.predicted["summary"], fix
            assert fix.predicted.get("starts") is not False, fix
            assert f"predicted: {fix.predicted['summary'][:40]}" in flat
        elif fix.status == "unchecked":
            assert f"{fix.action} (unchecked" in text
        elif fix.status == "not_enough":                  # listed apart, after every fix that may work, unnumbered
            assert 0 < short_at < text.find(f"- {fix.action}: ")
            assert f"{number}. {fix.action}" not in text
            assert all(f.status == "not_enough" for f in report.diagnosis.fixes[number - 1:])
    statuses = [f.status for f in report.diagnosis.fixes if "other_process_pids" not in f.computed_from]
    if "unchecked" in statuses:                           # a checked fix always comes before an unchecked one
        assert "checked" not in statuses[statuses.index("unchecked"):]
    if report.launch is not None:
        lead = report.diagnosis.fixes[report.launch.fix_index - 1]
        assert lead.status == "checked" and lead.flag and all(
            f.status != "checked" or not f.flag or f.value is None
            for f in report.diagnosis.fixes[:report.launch.fix_index - 1])


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
    assert not fix.checked and fix.predicted["unknown"] and fix.status == "unchecked"
    assert "KV bytes per token" in fix.predicted["summary"]
    assert fix.needs == ("--model-config CONFIG",)
    text = render_text(report)
    assert "--gpu-memory-utilization 0.80 (unchecked: give --model-config" in text
    assert report.command is None and "No command to paste: no flag fix above is checked" in text


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
    per_request = (facts["kv_cache_usage_max"].value * facts["kv_cache_tokens"].value
                   / facts["running_at_saturation"].value)
    assert fix.value == int(0.9 * facts["kv_cache_tokens"].value / per_request)
    assert fix.checked and fix.predicted["kv_cache_usage"] <= 0.9


# --- the order fixes come in, and what the model checks them against -----------------------------------

README_LOG = "v1/kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log"


def _json(*args):
    return json_report(*args)


def test_the_process_the_evidence_names_comes_first(kit):
    report = report_of(kit, "v0-old/external_pressure-llama3-8b-l4-notebook-holds-15g.log")
    first = report.diagnosis.fixes[0]
    assert first.action == "Find and stop or move process 2231 holding 15.38 GiB on this GPU"
    assert "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv" in first.why
    assert report.diagnosis.facts["other_process_pids"].value == "2231"


def test_more_kv_comes_first_and_says_when_it_still_preempts(kit):
    """128 requests (--max-num-seqs) of ~1,002 tokens need 128,267 KV tokens: FP8's 82,336 holds more but not
    all of them; the fix says so and what to combine it with. Fewer sequences come after more KV."""
    report = report_of(kit, "v1/preemption_slowdown-llama31-8b-4090-091-kv99-waiting-grows.log.bz2")
    fixes = {f.flag: f for f in report.diagnosis.fixes}
    fp8, tp, seqs = fixes["--kv-cache-dtype"], fixes["--tensor-parallel-size"], fixes["--max-num-seqs"]
    order = [f.flag for f in report.diagnosis.fixes]
    assert fp8.status == "checked" and order.index("--kv-cache-dtype") < order.index("--max-num-seqs") \
        < order.index("--tensor-parallel-size")
    assert ("still preempts: with --max-num-seqs 128, 128 requests of ~1,002 tokens need 128,267 KV tokens and "
            "the cache would hold 82,336; combine with --max-num-seqs 73") in fp8.predicted["summary"]
    assert tp.status == "checked" and tp.predicted["kv_cache_tokens"] >= 128_267
    assert seqs.status == "checked"
    assert seqs.value * seqs.predicted["tokens_per_request"] <= seqs.predicted["kv_cache_tokens"]
    assert "it costs throughput: 36 requests decode at once where up to 46 did" in seqs.why
    assert report.command.endswith("--kv-cache-dtype fp8")


def test_tensor_parallel_must_divide_the_attention_heads():
    """Qwen2.5-7B has 28 heads: vLLM refuses --tensor-parallel-size 8, and so does the prediction."""
    code, data = _json_scenario("whatif", str(FIXTURES / "logs" / README_LOG), "--tensor-parallel-size", "8")
    assert code == 1 and data["verdict"] == "refused"
    assert data["reason"].startswith("vLLM refuses --tensor-parallel-size 8: the model's 28 attention heads")
    code, data = _json_scenario("whatif", str(FIXTURES / "logs" / README_LOG), "--tensor-parallel-size", "4")
    assert data["verdict"] == "fits"


def test_a_length_beyond_what_the_model_takes_is_refused():
    """The incident ran 131,072 tokens with YaRN in --hf-overrides; beyond it vLLM refuses the length."""
    code, data = _json_scenario("whatif", str(FIXTURES / "logs" / README_LOG), "--max-model-len", "262144")
    assert code == 1 and data["verdict"] == "refused" and "above the 131,072 tokens the model takes" in data["reason"]


def _json_scenario(*args):
    result = run_cli(*args, "--format", "json")
    return result.returncode, json.loads(result.stdout)


def test_the_gpu_given_on_the_command_line_sizes_the_fix():
    _, bare = _json(str(FIXTURES / "logs" / README_LOG))
    raise_util = next(f for f in bare["fixes"] if f["flag"] == "--gpu-memory-utilization")
    assert raise_util["status"] == "unchecked" and raise_util["needs"] == ["--gpu NAME or --gpu-memory-gib GIB"]
    _, given = _json(str(FIXTURES / "logs" / README_LOG), "--gpu", "L4")
    assert given["facts"]["gpu_total_gib"]["value"] == 22.05
    assert given["facts"]["gpu_total_gib"]["note"].startswith("given: --gpu L4 (NVIDIA L4: 22.05 GiB")
    sized = next(f for f in given["fixes"] if f["action"] == "Raising --gpu-memory-utilization")
    assert sized["status"] == "not_enough" and sized["why"].startswith("131072 tokens would need 1.05")


def test_the_model_config_checks_what_the_log_could_not():
    log = str(FIXTURES / "logs" / "v0-old" / "external_pressure-llama31-8b-tp2-a10g-serving-oom-logprobs.log")
    _, bare = _json(log)
    assert bare["command"] is None
    _, given = _json(log, "--model-config", str(FIXTURES / "configs" / "llama-3.1-8b-instruct.json"))
    fix = next(f for f in given["fixes"] if f["flag"] == "--gpu-memory-utilization")
    assert fix["status"] == "checked" and given["command"].endswith("--gpu-memory-utilization 0.8")


def test_the_node_s_gpus_bound_the_tensor_parallel_fix():
    log = str(FIXTURES / "logs" / "v1" / "weights_dont_fit-qwen25-72b-tp2-l40s-both-ranks-oom.log")
    _, bare = _json(log)
    assert bare["fixes"][0]["action"] == "--tensor-parallel-size 8"
    _, four = _json(log, "--gpus", "4")
    assert not any(f["flag"] == "--tensor-parallel-size" and f["value"] for f in four["fixes"])
    beyond = next(f for f in four["fixes"] if f["action"].startswith("Splitting the weights over more GPUs"))
    assert beyond["status"] == "not_enough" and "need more than the 4 GPUs of this node (--gpus)" in beyond["why"]


@pytest.mark.parametrize("args,needle", [
    (["--gpu", "B300"], "--gpu 'B300' is not a GPU vtriage knows (L4, A10G, L40S, A100-40, A100-80, H100"),
    (["--gpu", "h100", "--gpu-memory-gib", "80"], "--gpu and --gpu-memory-gib both give the GPU's memory"),
])
def test_gpu_options_refuse_what_they_cannot_use(args, needle):
    result = run_cli(str(FIXTURES / "logs" / README_LOG), *args)
    assert result.returncode == 2 and needle in result.stderr.decode() and b"Traceback" not in result.stderr


def test_every_hint_names_an_option_vtriage_file_accepts(kit):
    """Fixes, predictions and warnings tell the user what to give; each option they name must exist."""
    from triage.cli import diagnose
    options = {opt for p in diagnose.params for opt in getattr(p, "opts", [])}
    for entry in MANIFEST:
        report = report_of(kit, entry["file"])
        said = " ".join([*(n for f in report.diagnosis.fixes for n in f.needs),
                         *(" ".join(f.predicted.get("unknown", [])) for f in report.diagnosis.fixes if f.predicted),
                         *report.warnings])
        for hint in re.findall(r"\bgive (--[a-z][a-z-]+)", said) + re.findall(r"(--[a-z][a-z-]+) \(the ", said):
            assert hint in options, (entry["file"], hint)


def test_kv_bytes_per_token_are_shown_to_the_precision_the_log_gives():
    log = str(FIXTURES / "logs" / README_LOG)
    out = run_cli("whatif", log, "--kv-cache-dtype", "fp8").stdout.decode()
    row = next(line for line in out.splitlines() if line.strip().startswith("KV bytes per token"))
    assert row.split()[4:] == ["57,340", "(±41)", "28,670", "(±20)"]      # 7.00 GiB / 131,072: to +/- 41 bytes
    exact = run_cli("whatif", log, "--kv-cache-dtype", "fp8", "--model-config",
                    str(FIXTURES / "configs" / "qwen2.5-7b-instruct.json")).stdout.decode()
    row = next(line for line in exact.splitlines() if line.strip().startswith("KV bytes per token"))
    assert row.split()[4:] == ["57,344", "28,672"]                         # 28 layers x 4 KV heads x 128 x 2 x 2
