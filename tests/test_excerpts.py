"""Excerpts arrive mangled: hard-wrapped mid-word, flattened onto one line, cut mid-timestamp, their process
prefix missing its "(". Each is read as the log it was cut from, and messages vLLM reworded, the Hub's refusals,
a hung rank and a killed process are each told apart."""
from __future__ import annotations

import pytest

from conftest import diagnose_text

STATS = ("(APIServer pid=1) INFO 09-30 10:10:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 912.3 "
         "tokens/s, Avg generation throughput: 880.1 tokens/s, Running: 44 reqs, Waiting: {w} reqs, GPU KV cache "
         "usage: {kv:.1f}%, Prefix cache hit rate: 1.0%")
SATURATED = [STATS.format(s=10 * i, w=20 + 5 * i, kv=97.0 + i / 2) for i in range(4)]
V0_SERVING_OOM = [
    "INFO 11-04 08:12:58 model_runner.py:1067] Loading model weights took 27.5876 GB",
    "INFO 11-04 08:20:11 metrics.py:349] Avg prompt throughput: 2210.4 tokens/s, Avg generation throughput: 311.9 "
    "tokens/s, Running: 17 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 58.3%, CPU KV cache usage: "
    "0.0%.",
    "ERROR 11-04 08:20:14 engine.py:158] CUDA out of memory. Tried to allocate 4.64 GiB. GPU 0 has a total capacity "
    "of 79.15 GiB of which 2.91 GiB is free. Process 3312 has 9.40 GiB memory in use. Including non-PyTorch memory, "
    "this process has 66.82 GiB memory in use.",
    "CRITICAL 11-04 08:20:15 launcher.py:99] MQLLMEngine is already dead, terminating server process",
]


def verdict(kit, text: str):
    return diagnose_text(kit, text).diagnosis


def test_stats_hard_wrapped_at_80_columns_are_read_whole(kit):
    """V1's prefix takes 56 of the 80 columns: the first row holds half the anchor."""
    rows = [line[i:i + 80] for line in SATURATED for i in range(0, len(line), 80)]
    d = verdict(kit, "\n".join(rows) + "\n")
    assert d.facts["stats_lines"].value == 4
    assert d.verdict == "preemption_slowdown"


def test_a_paste_flattened_onto_one_line_is_read_record_by_record(kit):
    d = verdict(kit, " ".join(V0_SERVING_OOM) + "\n")
    assert (d.verdict, d.facts["failed_phase"].value) == ("external_pressure", "serving")
    assert d.facts["other_processes_gib"].value == pytest.approx(9.4)
    assert d.facts["weights_gib"].value == pytest.approx(27.5876)


def test_flattened_stats_count_each_interval(kit):
    d = verdict(kit, " ".join(SATURATED) + "\n")
    assert d.facts["stats_lines"].value == 4


def test_a_message_that_names_a_level_and_a_time_is_not_cut_in_two(kit):
    text = ("(APIServer pid=1) INFO 09-30 10:00:00 [api_server.py:12] request log: INFO 09-30 10:00:01 was the "
            "time the client sent, see its own log\n")
    assert diagnose_text(kit, text).inputs[0].lines_read == 1
    assert "failure_kind" not in verdict(kit, text).facts


def test_lines_cut_mid_timestamp_keep_their_error_type(kit):
    text = "\n".join([
        "3 10:00:45 [core.py:718] EngineCore failed to start.",
        "3 10:00:45 [core.py:718] Traceback (most recent call last):",
        '3 10:00:45 [core.py:718]   File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/'
        'default_loader.py", line 264, in load_weights',
        "3 10:00:45 [core.py:718] KeyError: 'model.layers.0.mlp.experts.w13_weight'",
    ]) + "\n"
    d = verdict(kit, text)
    assert (d.verdict, d.facts["failure_kind"].value) == ("other_failure", "exception")


def test_a_process_prefix_that_lost_its_parenthesis_still_names_the_process(kit):
    text = ("EngineCore_DP0 pid=2412) ERROR 09-30 10:10:11 [core.py:720] torch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 79.19 GiB of which 2.02 GiB is free.\n")
    assert verdict(kit, text).facts["failing_process"].value == "EngineCore_DP0 pid=2412"


@pytest.mark.parametrize("line", [
    "(APIServer pid=1) ValueError: This model's maximum context length is 8192 tokens. However, your request has "
    "9133 input tokens. Please reduce the length of the input messages.",
    "(APIServer pid=1) ValueError: 'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum "
    "context length is 8192 tokens and your request has 5012 input tokens (4096 > 8192 - 5012).",
    "vllm.exceptions.VLLMValidationError: This model's maximum context length is 1024 tokens. However, your prompt "
    "contains at least 1025 input tokens, which exceeds this limit even without any output tokens.",
])
def test_one_request_refused_for_its_length_leaves_a_serving_server_healthy(kit, line):
    text = "\n".join([
        SATURATED[0].replace("Waiting: 20", "Waiting: 0").replace("97.0%", "31.0%"),
        "(APIServer pid=1) ERROR 09-30 10:10:12 [serving_chat.py:222] Error in preprocessing prompt inputs",
        "(APIServer pid=1) ERROR 09-30 10:10:12 [serving_chat.py:222] Traceback (most recent call last):",
        line,
        SATURATED[1].replace("Waiting: 25", "Waiting: 0").replace("97.5%", "33.0%"),
        SATURATED[2].replace("Waiting: 30", "Waiting: 0").replace("98.0%", "30.0%"),
    ]) + "\n"
    d = verdict(kit, text)
    assert d.verdict == "healthy", d.rule_path


SHM_WAIT = ("(EngineCore_DP0 pid=388) INFO 11-07 03:21:{s:02d} [shm_broadcast.py:466] No available shared memory "
            "broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing "
            "some time-consuming work (e.g. compilation).")


def test_a_log_that_ends_waiting_on_a_hung_rank_is_a_hang(kit):
    d = verdict(kit, "\n".join([SATURATED[0], SHM_WAIT.format(s=10), SHM_WAIT.format(s=40)]) + "\n")
    assert (d.verdict, d.rule_path[-1]) == ("other_failure", "engine-hang")


def test_a_long_compile_that_goes_on_is_not_a_hang(kit):
    text = "\n".join([SHM_WAIT.format(s=10),
                      "(Worker pid=185) INFO 04-15 13:43:42 [monitor.py:76] Initial profiling/warmup run took 107.62 s",
                      "(EngineCore pid=127) INFO 04-15 13:44:02 [core.py:210] init engine (profile, create kv cache, "
                      "warmup model) took 152.10 seconds"]) + "\n"
    d = verdict(kit, text)
    assert "failure_kind" not in d.facts and d.verdict == "healthy"


@pytest.mark.parametrize("line", [
    "(APIServer pid=1) Access to model meta-llama/Llama-3.2-3B-Instruct is restricted. You must have access to it "
    "and be authenticated to access it. Please log in.",
    "(APIServer pid=1) huggingface_hub.errors.HfHubHTTPError: 403 Forbidden: Please enable access to public gated "
    "repositories in your fine-grained token settings to view this repository..",
    "OSError: meta-llama/Llama-3.1-8B-Instruct is a gated repository. Make sure to request access at "
    "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct and pass a token having permission to this repo.",
])
def test_every_way_the_hub_refuses_a_model_is_an_access_failure(kit, line):
    d = verdict(kit, line + "\n")
    assert (d.verdict, d.facts["failure_kind"].value) == ("other_failure", "hub_auth")


def test_an_engine_that_exited_is_not_a_requested_stop(kit):
    text = "\n".join([
        SATURATED[0],
        "(APIServer pid=9) WARNING 12-02 07:20:00 [core_client.py:817] [shutdown] MPClient: engine core exited "
        "unexpectedly; starting cleanup",
        "(APIServer pid=9) INFO 12-02 07:20:00 [core_client.py:770] [shutdown] MPClient: start timeout=default",
        "(APIServer pid=9) ERROR 12-02 07:20:00 [async_llm.py:906] AsyncLLM output_handler failed.",
        "(APIServer pid=9) ERROR 12-02 07:20:00 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]) + "\n"
    d = verdict(kit, text)
    assert "shut_down" not in d.facts
    assert (d.verdict, d.facts["failure_kind"].value) == ("inconclusive", "engine_died")


def test_a_process_killed_by_sigkill_says_what_would_tell_why(kit):
    text = ("(EngineCore pid=5850) ERROR 11-30 14:18:30 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
            "unexpectedly (exit code: -9), shutting down executor.\n")
    d = verdict(kit, text)
    assert (d.verdict, d.facts["failure_kind"].value) == ("inconclusive", "process_killed")
    assert "OOMKilled" in d.findings[0].settle
