"""Parameter counts: config.json first, the table of common models second (mixtures of experts count every
expert), the name last and marked as a guess; and the GPUs `--gpu NAME` knows."""
from __future__ import annotations

import pytest

from triage.capacity.catalog import GPU_NAMES, known_gpu, known_model, parameter_count
from triage.capacity.registry import UserFigures, weights_needed
from triage.model import Fact

from conftest import FIXTURES, config_entries, diagnose_files, diagnose_text, load_spec


@pytest.mark.parametrize("entry", config_entries(), ids=lambda e: e["file"])
def test_the_table_agrees_with_every_config_it_shares_a_model_with(entry):
    """Where fixtures/configs/ holds a model's config.json, the table's count, heads and context match it."""
    spec = load_spec(entry["file"])
    known = known_model(entry["model"])
    if known is None:
        pytest.skip(f"{entry['model']} is not in the table")
    assert known.params_b * 1e9 == pytest.approx(spec.total_params, rel=0.01)
    assert known.attention_heads == spec.attention_heads
    assert known.max_position_embeddings == spec.max_position_embeddings or known.name == "DeepSeek-V2-Lite"


def test_mixtures_of_experts_count_every_expert_not_the_name_s_product():
    assert parameter_count("mistralai/Mixtral-8x7B-Instruct-v0.1").params == pytest.approx(46.7e9)
    assert parameter_count("Qwen/Qwen3-30B-A3B-Instruct-2507").params == pytest.approx(30.53e9)
    assert parameter_count("meta-llama/Llama-4-Scout-17B-16E-Instruct").params == pytest.approx(108.64e9)
    assert parameter_count("openai/gpt-oss-20b").source == "table"


def test_a_name_alone_is_a_guess_and_says_which_way_it_errs():
    mixture = parameter_count("acme/FooMoE-4x3B-Chat")
    assert mixture.guess and mixture.bound == "upper" and mixture.params == 12e9
    assert "guessed from the name" in mixture.how and "--model-config" in mixture.how
    active = parameter_count("acme/Bar-17B-16E-Instruct")
    assert active.guess and active.bound == "lower" and "only the active parameters" in active.how
    dense = parameter_count("acme/Baz-13B")
    assert dense.guess and dense.bound is None and dense.params == 13e9
    assert parameter_count("acme/no-size-here") is None


def test_the_config_wins_over_the_table():
    spec = load_spec("mixtral-8x7b-instruct-v0.1.json")
    count = parameter_count("something/else-70B", spec)
    assert count.source == "config" and count.params == spec.total_params


def test_weights_sized_from_a_guess_are_never_a_checked_fix(kit):
    facts = {"model": Fact("model", "acme/FooMoE-8x7B-Chat"), "dtype": Fact("dtype", "bfloat16")}
    needed = weights_needed(facts)
    assert needed.guess and needed.gib == pytest.approx(56e9 * 2 / 2**30)
    exact = weights_needed(facts, UserFigures(spec=load_spec("mixtral-8x7b-instruct-v0.1.json")))
    assert not exact.guess and exact.gib == pytest.approx(load_spec("mixtral-8x7b-instruct-v0.1.json").weights_gib())
    log = """\
INFO 03-11 10:00:00 llm_engine.py:232] Initializing an LLM engine (v0.7.3) with config: model='acme/FooMoE-8x7B-Chat', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto
INFO 03-11 10:00:05 model_runner.py:1056] Starting to load model acme/FooMoE-8x7B-Chat...
ERROR 03-11 10:00:40 engine.py:366] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of 79.25 GiB of which 0.96 GiB is free. Including non-PyTorch memory, this process has 78.28 GiB memory in use. Of the allocated memory 77.61 GiB is allocated by PyTorch, and 12.34 MiB is reserved by PyTorch but unallocated.
"""  # noqa: E501 - log lines as vLLM prints them
    report = diagnose_text(kit, log)
    assert report.diagnosis.verdict == "weights_dont_fit"
    tp = next(f for f in report.diagnosis.fixes if f.flag == "--tensor-parallel-size")
    assert tp.status == "unchecked" and any("--model-config" in n for n in tp.needs)


def test_the_mixtral_fixture_is_sized_from_its_real_total(kit):
    report = diagnose_files(kit,
                            FIXTURES / "logs" / "v0-late" / "weights_dont_fit-mixtral-8x7b-one-a100-restart-x3.log")
    tp = next(f for f in report.diagnosis.fixes if f.flag == "--tensor-parallel-size")
    assert "46.7 B parameters (Mixtral-8x7B, all 8 experts)" in tp.why and tp.status == "checked"
    assert tp.predicted["weights_gib"] == pytest.approx(46.7e9 * 2 / 2**30 / 2, abs=0.01)


def test_a_log_cut_after_the_engine_config_gets_a_low_confidence_estimate(kit):
    line = ("INFO 12-27 08:52:17 llm_engine.py:249] Initializing an LLM engine (v0.6.4) with config: "
            "model='meta-llama/Llama-3.1-405B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, "
            "tensor_parallel_size={tp}, pipeline_parallel_size=1, quantization=None, enforce_eager=False\n")
    one = diagnose_text(kit, line.format(tp=1))
    assert (one.diagnosis.verdict, one.diagnosis.confidence) == ("weights_dont_fit", "low")
    assert one.diagnosis.facts["weights_estimate_gib"].value == pytest.approx(405.85e9 * 2 / 2**30, abs=0.01)
    assert one.diagnosis.findings[0].summary.startswith("An estimate from the configuration alone: 405.85 B parameters")
    eight = diagnose_text(kit, line.format(tp=8))               # 94.5 GiB per GPU: an H200 could hold it
    assert eight.diagnosis.verdict == "inconclusive"
    assert eight.diagnosis.facts["weights_estimate_gib"].value == pytest.approx(94.49, abs=0.01)


def test_the_estimate_weighs_the_gpu_given_on_the_command_line(tmp_path):
    from conftest import json_report
    log = tmp_path / "cut.log"
    log.write_text("INFO 12-27 08:52:17 llm_engine.py:249] Initializing an LLM engine (v0.6.4) with config: "
                   "model='meta-llama/Llama-3.1-405B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, "
                   "tensor_parallel_size=8, pipeline_parallel_size=1, quantization=None, enforce_eager=False\n")
    _, unknown = json_report(str(log))
    _, h100 = json_report(str(log), "--gpu", "H100")
    assert unknown["verdict"] == "inconclusive" and h100["verdict"] == "weights_dont_fit"
    assert "about 94 GiB of weights per GPU (the GPU has 79.19 GiB)" in h100["summary"]


def test_the_gpus_it_knows_by_name():
    assert known_gpu("L4").total_gib == 22.05 and known_gpu("nvidia h100").total_gib == 79.19
    assert known_gpu("A100_40GB").total_gib == 39.39 and known_gpu("a100-80").total_gib == 79.25
    assert known_gpu("H200").total_gib == 139.80 and known_gpu("AMD Instinct MI300X").total_gib == 191.98
    assert known_gpu("RTX 4090").total_gib == 23.65 and known_gpu("geforce rtx-3090").total_gib == 23.56
    assert known_gpu("B300") is None
    assert GPU_NAMES == ("L4", "A10G", "L40S", "A100-40", "A100-80", "H100", "H100-NVL", "H200", "MI300X",
                         "RTX-3090", "RTX-4090")
