"""The traps the issue names, each as a user would hit it: the verdict and the figures behind it."""
from __future__ import annotations

from conftest import diagnose_text


def verdict(report):
    return report.diagnosis.verdict


def fact(report, name):
    f = report.diagnosis.facts.get(name)
    return None if f is None else f.value


def test_oom_at_load_with_another_process_is_external_pressure(kit):
    report = diagnose_text(kit, """\
INFO 08-01 12:01:00 api_server.py:585] args: Namespace(model='meta-llama/Llama-3.1-8B-Instruct', gpu_memory_utilization=0.9, max_model_len=8192, tensor_parallel_size=1)
INFO 08-01 12:01:10 model_runner.py:1056] Starting to load model meta-llama/Llama-3.1-8B-Instruct...
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 12.51 GiB memory in use. Process 4410 has 65.50 GiB memory in use. Of the allocated memory 11.90 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.
""")  # noqa: E501 - log lines as vLLM prints them
    assert verdict(report) == "external_pressure"
    assert fact(report, "failed_phase") == "loading_weights"
    assert fact(report, "other_processes_gib") == 65.5
    # (79.15 - 65.50) / 79.15 - 0.02 floors to 0.15: 11.87 GiB, less than Llama-3.1-8B's 14.96 GiB of weights,
    # so the capacity model refuses to offer it and says to free the GPU instead.
    assert not any(f.flag == "--gpu-memory-utilization" for f in report.diagnosis.fixes)
    refusal = next(f for f in report.diagnosis.fixes if "cannot help" in f.action)
    assert "0.15" in refusal.why and "14.96 GiB" in refusal.why and "8.03 B parameters (Llama-3.1-8B)" in refusal.why


def test_container_pid_view_is_vllm_itself(kit):
    """torch names only 'Process N' (host PID) for vLLM itself inside a container: not another process."""
    report = diagnose_text(kit, """\
INFO 08-01 12:01:10 model_runner.py:1056] Starting to load model Qwen/Qwen2-7B-Instruct...
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 518.00 MiB. GPU 0 has a total capacty of 21.67 GiB of which 4.06 MiB is free. Process 2417585 has 21.65 GiB memory in use. Of the allocated memory 21.32 GiB is allocated by PyTorch, and 1018.00 KiB is reserved by PyTorch but unallocated.
""")  # noqa: E501 - log lines as vLLM prints them
    assert verdict(report) == "weights_dont_fit"
    assert fact(report, "other_processes_gib") == 0
    assert fact(report, "this_process_gib") == 21.65
    assert "container" in report.diagnosis.facts["this_process_gib"].note


def test_oom_during_graph_capture_is_headroom_not_kv(kit):
    report = diagnose_text(kit, """\
(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {'model': 'Qwen/Qwen3-8B', 'gpu_memory_utilization': 0.95, 'max_model_len': 32768}
(EngineCore_DP0 pid=2412) INFO 09-30 10:01:12 [gpu_model_runner.py:2007] Model loading took 15.27 GiB and 9.81 seconds
(EngineCore_DP0 pid=2412) INFO 09-30 10:01:40 [gpu_worker.py:298] Available KV cache memory: 57.0 GiB
(EngineCore_DP0 pid=2412) INFO 09-30 10:01:41 [kv_cache_utils.py:864] GPU KV cache size: 415,072 tokens
(EngineCore_DP0 pid=2412) INFO 09-30 10:01:41 [kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens per request: 12.67x
(EngineCore_DP0 pid=2412) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  40%|████      | 27/67 [00:04<00:06,  6.30it/s]
(EngineCore_DP0 pid=2412) ERROR 09-30 10:01:58 [core.py:708] EngineCore failed to start.
(EngineCore_DP0 pid=2412) ERROR 09-30 10:01:58 [core.py:708] Traceback (most recent call last):
(EngineCore_DP0 pid=2412) ERROR 09-30 10:01:58 [core.py:708]   File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 83, in _initialize_kv_caches
(EngineCore_DP0 pid=2412) ERROR 09-30 10:01:58 [core.py:708]   File "/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 320, in compile_or_warm_up_model
(EngineCore_DP0 pid=2412) ERROR 09-30 10:01:58 [core.py:708]   File "/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3098, in capture_model
(EngineCore_DP0 pid=2412) ERROR 09-30 10:01:58 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity of 79.19 GiB of which 920.00 MiB is free. Including non-PyTorch memory, this process has 78.28 GiB memory in use. Of the allocated memory 76.40 GiB is allocated by PyTorch, with 212.00 MiB allocated in private pools (e.g., CUDA Graphs), and 402.00 MiB is reserved by PyTorch but unallocated.
(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}
""")  # noqa: E501 - log lines as vLLM prints them
    assert verdict(report) == "external_pressure"
    assert fact(report, "failed_phase") == "cuda_graph_capture"
    flags = {f.flag: f.value for f in report.diagnosis.fixes if f.flag}
    assert flags["--gpu-memory-utilization"] == 0.92  # 0.95 - (1.25 + 0.5) / 79.19, floored
    assert flags["--enforce-eager"] is True
    assert "--max-model-len" not in flags
    ruled = {r.verdict: r.reason for r in report.diagnosis.ruled_out}
    assert "12.67x" in ruled["kv_cache_too_small"]


def test_healthy_log_may_mention_preemption_once_and_print_the_oom_hint(kit):
    report = diagnose_text(kit, """\
INFO 06-28 23:40:31 model_runner.py:889] Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static.
INFO 06-28 23:40:31 model_runner.py:893] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode. You can also reduce the `max_num_seqs` as needed to decrease memory usage.
INFO 06-28 23:40:44 model_runner.py:965] Graph capturing finished in 13 secs.
INFO:     Application startup complete.
WARNING 06-28 23:51:02 scheduler.py:1089] Sequence group cmpl-1 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1
INFO 06-28 23:51:05 metrics.py:341] Avg prompt throughput: 312.0 tokens/s, Avg generation throughput: 806.6 tokens/s, Running: 37 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 71.6%, CPU KV cache usage: 0.0%.
""")  # noqa: E501 - log lines as vLLM prints them
    assert verdict(report) == "healthy"
    assert fact(report, "preemptions") == 1
    assert len(report.diagnosis.findings) == 1


def test_nccl_crash_after_serving_is_other_failure(kit):
    report = diagnose_text(kit, """\
INFO:     Application startup complete.
INFO 01-22 18:27:20 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.0%, CPU KV cache usage: 0.0%.
INFO 01-22 18:27:25 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.1%, CPU KV cache usage: 0.0%.
[rank1]:[E1130 02:11:45.123456 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) ran for 600046 milliseconds before timing out.
ERROR 01-22 18:37:31 async_llm_engine.py:64] Engine background task failed
""")  # noqa: E501 - log lines as vLLM prints them
    assert verdict(report) == "other_failure"
    assert fact(report, "failure_kind") == "nccl_timeout"
    assert fact(report, "failed_phase") == "serving"


def test_request_errors_while_serving_are_not_a_failure(kit):
    report = diagnose_text(kit, """\
INFO:     Application startup complete.
ERROR 01-22 18:27:19 serving_chat.py:200] Error in preprocessing prompt inputs
ValueError: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.
INFO 01-22 18:27:20 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.0%, CPU KV cache usage: 0.0%.
INFO 01-22 18:27:25 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.1%, CPU KV cache usage: 0.0%.
""")  # noqa: E501 - log lines as vLLM prints them
    assert verdict(report) == "healthy"
    assert fact(report, "transient_errors") == 1


def test_ranks_can_fail_differently(kit):
    """Rank 3 OOMs while loading although the driver already loaded: the failing rank's traceback decides."""
    report = diagnose_text(kit, """\
INFO 03-12 17:20:01 llm_engine.py:161] Initializing an LLM engine (v0.5.3) with config: model='meta-llama/Meta-Llama-3-70B', dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size=4
INFO 03-12 17:20:41 model_runner.py:1008] Loading model weights took 32.8500 GB
(VllmWorkerProcess pid=811) INFO 03-12 17:20:41 model_runner.py:1008] Loading model weights took 32.8500 GB
(VllmWorkerProcess pid=813) ERROR 03-12 17:20:42 multiproc_worker_utils.py:226] Exception in worker VllmWorkerProcess while processing method load_model: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 3 has a total capacity of 39.39 GiB of which 312.00 MiB is free. Including non-PyTorch memory, this process has 39.07 GiB memory in use. Of the allocated memory 38.20 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated., Traceback (most recent call last):
""")  # noqa: E501 - log lines as vLLM prints them
    assert verdict(report) == "weights_dont_fit"
    assert fact(report, "failed_phase") == "loading_weights"


def test_missing_is_unknown_not_zero(kit):
    report = diagnose_text(kit, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    facts = report.diagnosis.facts
    assert "gpu_total_gib" not in facts and "other_processes_gib" not in facts
    assert verdict(report) == "inconclusive"


def test_no_vllm_output_is_its_own_outcome(kit):
    report = diagnose_text(kit, "hello\nworld\n")
    assert verdict(report) == "inconclusive"
    assert report.diagnosis.rule_path == ("no-vllm-output",)


def test_settings_and_defaults(kit):
    report = diagnose_text(kit, """\
(APIServer pid=1) INFO 09-30 10:00:01 [api_server.py:1816] vLLM API server version 0.10.2
(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {'model': 'Qwen/Qwen3-8B', 'max_model_len': 32768, 'kv_cache_dtype': 'fp8', 'enforce_eager': True}
""")  # noqa: E501 - log lines as vLLM prints them
    facts = report.diagnosis.facts
    assert fact(report, "gpu_memory_utilization") == 0.9 and "default" in facts["gpu_memory_utilization"].note
    assert fact(report, "kv_cache_dtype") == "fp8" and fact(report, "enforce_eager") is True
    assert fact(report, "engine") == "v1" and fact(report, "vllm_version") == "0.10.2"
