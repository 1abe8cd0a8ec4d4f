"""The facts the rules may name: the closed vocabulary between the stages that find facts and the rules.

Every fact has a name in `FACTS` (units in the name; ratios are 0-1), a type and a meaning. A figure the input
does not give is absent, never zero. Rules may only name facts listed here, which is what lets the log formats
drift between vLLM versions without touching a rule. docs/facts.md is generated from this table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..vocabulary import KV_SATURATED, PHASES

_FULL = f"{KV_SATURATED:.0%}"      # the saturation line, as the descriptions say it


@dataclass(frozen=True, slots=True)
class FactSpec:
    name: str
    type: type
    unit: str | None
    description: str


def _spec(name: str, type_: type, unit: str | None, description: str) -> FactSpec:
    return FactSpec(name, type_, unit, description)


FACTS: Mapping[str, FactSpec] = {s.name: s for s in (
    # Identity and settings
    _spec("vllm_version", str, None, "vLLM version printed by the server or the engine config line."),
    _spec("engine", str, None, "Engine generation: v0 or v1."),
    _spec("release_band", str, None,
          "The oldest vLLM release band the log's formats allow, when it names no version (v0-old, v0-late, v1)."),
    _spec("model", str, None, "Model name or path being served."),
    _spec("max_model_len", int, "tokens", "Maximum sequence length the engine was asked to serve."),
    _spec("gpu_memory_utilization", float, "ratio", "Fraction of GPU memory vLLM may use (its budget)."),
    _spec("tensor_parallel_size", int, "GPUs", "Tensor-parallel size (GPUs the weights are split over)."),
    _spec("pipeline_parallel_size", int, "GPUs", "Pipeline-parallel size."),
    _spec("max_num_seqs", int, "requests", "Maximum number of sequences batched together."),
    _spec("max_num_batched_tokens", int, "tokens", "Maximum tokens in one scheduler step."),
    _spec("dtype", str, None, "Weight dtype."),
    _spec("quantization", str, None, "Weight quantization method."),
    _spec("kv_cache_dtype", str, None, "KV cache dtype (auto follows the model dtype)."),
    _spec("enforce_eager", bool, None, "CUDA graphs disabled."),
    _spec("enable_prefix_caching", bool, None, "Prefix caching enabled."),
    _spec("block_size", int, "tokens", "KV cache block size."),
    _spec("swap_space_gib", float, "GiB", "CPU memory per GPU for V0's swapped-out KV blocks (--swap-space)."),
    _spec("platform", str, None,
          "Device vLLM runs on: cuda, rocm, xpu, npu (Ascend), tpu or cpu (host RAM is the device memory)."),
    _spec("profile_batch_tokens", int, "tokens",
          "Tokens in the profiling run's one batch (max_num_batched_tokens; V0 without chunked prefill: "
          "max(max_model_len, 2048))."),
    # Memory at startup
    _spec("gpu_total_gib", float, "GiB", "Total memory of the GPU as torch or vLLM reports it."),
    _spec("budget_gib", float, "GiB", "gpu_memory_utilization x total: what vLLM may use."),
    _spec("weights_gib", float, "GiB", "Memory the model weights take on one GPU."),
    _spec("model_params_b", float, "billion",
          "The model's parameters (every expert), from --model-config, the table of common models, or its name (a "
          "guess; the note says which)."),
    _spec("weights_estimate_gib", float, "GiB",
          "Weights one GPU would hold, estimated from the parameters x bytes per parameter / GPUs, when the log never "
          "printed them loaded."),
    _spec("activation_gib", float, "GiB", "Peak activation memory measured while profiling."),
    _spec("non_torch_gib", float, "GiB", "Memory outside torch's allocator (CUDA context, NCCL, ...)."),
    _spec("cuda_graph_gib", float, "GiB", "Memory CUDA graph capture took."),
    _spec("cuda_graph_estimate_gib", float, "GiB", "CUDA graph memory vLLM estimated while profiling (0.18+)."),
    _spec("cuda_graph_in_budget", bool, None, "The CUDA graph estimate comes out of the KV budget (V1 0.20+ default)."),
    _spec("kv_cache_gib", float, "GiB", "Memory available for the KV cache (can be negative)."),
    _spec("kv_cache_tokens", int, "tokens", "Tokens the KV cache holds on the smallest rank."),
    _spec("gpu_blocks", int, "blocks", "KV cache blocks (V0)."),
    _spec("max_concurrency", float, "x", "Full-length requests the KV cache holds at once."),
    _spec("kv_needed_gib", float, "GiB", "KV cache one max-length request needs (from vLLM's error)."),
    _spec("estimated_max_model_len", int, "tokens", "vLLM's own estimate of the longest length that fits."),
    _spec("kv_cache_sized", bool, None, "The KV cache was sized without error."),
    _spec("kv_requested_gib", float, "GiB",
          "KV cache memory asked for (CPU: VLLM_CPU_KVCACHE_SPACE, --kv-cache-memory-bytes, or what the "
          "utilization leaves)."),
    _spec("checkpoint_gib", float, "GiB", "Size of the model's checkpoint files (vLLM 0.30+ prints it while loading)."),
    # Memory at failure
    _spec("free_gib", float, "GiB",
          "Free GPU memory at the failure (torch's OOM text), else what vLLM measured free at startup."),
    _spec("requested_gib", float, "GiB", "Memory vLLM asked for at startup (utilization x total)."),
    _spec("tried_to_allocate_gib", float, "GiB", "The allocation that failed."),
    _spec("this_process_gib", float, "GiB", "Memory the failing process held (torch's OOM text)."),
    _spec("allocated_gib", float, "GiB", "Memory torch had allocated in the failing process."),
    _spec("private_pool_gib", float, "GiB", "Memory in torch private pools (CUDA graphs) at the OOM."),
    _spec("other_processes_gib", float, "GiB", "GPU memory held by processes other than vLLM."),
    _spec("other_processes", int, "processes", "How many other processes hold GPU memory."),
    _spec("other_process_pids", str, None,
          "The PIDs of the other processes holding GPU memory, when the input names them."),
    _spec("other_processes_max_gib", float, "GiB",
          "The most GPU memory processes other than vLLM can have held at the OOM: total - free - the least this "
          "process held (torch's figures)."),
    _spec("unidentified_processes_gib", float, "GiB",
          "GPU memory of processes torch lists as 'Process N' that may be vLLM itself (its host PID, in a container) "
          "or another process: the figures cannot tell."),
    _spec("unidentified_process_pids", str, None, "The PIDs of the processes unidentified_processes_gib counts."),
    _spec("oom_self_share", float, "ratio", "Share of the GPU the vLLM process itself held at the OOM."),
    # Failure
    _spec("failure_kind", str, None, "What failed first: cuda_oom, kv_too_small, nccl_error, ..."),
    _spec("failed_phase", str, None, "Startup phase the failure happened in: " + ", ".join(PHASES) + "."),
    _spec("failed_function", str, None,
          "The vLLM function (traceback frame or worker method) the failure happened in."),
    _spec("failed_in_scheduler", bool, None,
          "The failure's innermost vLLM frame is in the scheduler or its KV block manager (no GPU allocation there)."),
    _spec("reached_phase", str, None, "Furthest startup phase the log shows."),
    _spec("failure_message", str, None, "The root failure's line."),
    _spec("failing_process", str, None, "The process (rank) whose error is the root failure."),
    _spec("failing_processes", int, "processes", "Processes (TP ranks) that reported the failure."),
    _spec("engine_died", bool, None, "The engine or a worker died."),
    _spec("shut_down", bool, None, "The server was asked to stop (SIGTERM, Ctrl-C): what follows is its teardown."),
    _spec("transient_errors", int, "lines", "Errors the server recovered from (it kept serving)."),
    # Serving
    _spec("server_up", bool, None, "The API server or engine finished starting."),
    _spec("stats_lines", int, "lines", "Periodic stats lines seen."),
    _spec("kv_cache_usage_max", float, "ratio", "Highest KV cache usage in stats lines or metrics."),
    _spec("kv_cache_usage_mean", float, "ratio", "Mean KV cache usage over stats lines or metrics."),
    _spec("saturated_intervals", int, "intervals", f"Stats intervals with KV usage >= {_FULL}."),
    _spec("saturated_queue_intervals", int, "intervals",
          f"Stats intervals with KV usage >= {_FULL} and requests waiting or swapped."),
    _spec("saturated_queue_share", float, "ratio",
          f"Share of the stats intervals with KV usage >= {_FULL} and requests waiting or swapped."),
    _spec("stalled_intervals", int, "intervals",
          "Intervals (stats lines or scrapes) an engine's input ends with in which requests were there but nothing "
          "was processed: waiting with none running, or the same requests running without a token."),
    _spec("queue_persisted_intervals", int, "intervals",
          "Intervals (stats lines or scrapes) in a row, up to the last one, with requests waiting: a queue that "
          "did not drain (0 when the last one had none)."),
    _spec("waiting_at_end", int, "requests", "Requests waiting (or swapped) in the last stats interval or scrape."),
    _spec("waiting_max", int, "requests", "Largest waiting (pending) queue."),
    _spec("running_max", int, "requests", "Most requests running at once."),
    _spec("running_at_saturation", int, "requests", f"Requests running while the KV cache was >= {_FULL} full."),
    _spec("running_below_saturation", int, "requests",
          f"Most requests running at once while the KV cache stayed below {_FULL} and none was preempted."),
    _spec("swapped_max", int, "requests", "Most requests swapped to CPU (V0)."),
    _spec("preemptions", int, "preemptions",
          "Preemptions: V0's cumulative counter, V1's per-interval sum, or the metric."),
    _spec("preemption_warnings", int, "lines", "V0 preemption warning lines (one per 50 preemptions)."),
    _spec("preemption_mode", str, None, "RECOMPUTE or SWAP."),
    _spec("preemption_rate_per_min", float, "per minute", "Preemptions per minute over the logged window."),
    _spec("serving_minutes", float, "minutes", "Length of the serving window the log covers."),
    _spec("vllm_lines", int, "lines", "Lines that are vLLM output."),
    # From /metrics (saved snapshots, a live scrape or a Prometheus range): see docs/metrics.md
    _spec("metrics_declared_only", int, "metrics",
          "vLLM metrics the /metrics text declares (# HELP/# TYPE) while it holds no sample."),
    _spec("metrics_snapshots", int, "snapshots",
          "Scrapes of the metrics read (snapshots, live samples or query steps)."),
    _spec("metrics_window_seconds", float, "seconds", "Time the metrics scrapes span."),
    _spec("saturated_seconds", float, "seconds", f"Time the KV cache spent at >= {_FULL} usage in the metrics window."),
    _spec("saturated_share", float, "ratio", f"Share of the metrics window the KV cache spent at >= {_FULL} usage."),
    _spec("waiting_growth", int, "requests", "Waiting queue at the end of the metrics window minus at its start."),
    _spec("preemptions_since_start", int, "preemptions",
          "Preemptions since the server started (one snapshot's counter): context, not a rate."),
    _spec("server_uptime_seconds", float, "seconds",
          "How long the server had run at the scrape (process_start_time_seconds or _created)."),
    _spec("prefix_cache_hit_rate", float, "ratio", "Prefix cache hits / queries over the window."),
    _spec("requests_finished", int, "requests",
          "Requests that finished in the window (request_num_preemptions count)."),
    _spec("preemptions_per_request_mean", float, "preemptions", "Mean preemptions per finished request."),
    _spec("requests_preempted_share", float, "ratio",
          "Share of finished requests that were preempted (a lower bound when the histogram's first bucket is 1)."),
    _spec("ttft_p50_seconds", float, "seconds", "Median time to first token (histogram, over the window)."),
    _spec("ttft_p95_seconds", float, "seconds", "95th percentile time to first token."),
    _spec("e2e_latency_p50_seconds", float, "seconds", "Median end-to-end request latency."),
    _spec("e2e_latency_p95_seconds", float, "seconds", "95th percentile end-to-end request latency."),
    _spec("queue_time_p50_seconds", float, "seconds", "Median time requests spent waiting in the queue."),
    _spec("queue_time_p95_seconds", float, "seconds", "95th percentile time requests spent waiting in the queue."),
    _spec("inter_token_latency_p50_seconds", float, "seconds", "Median time between output tokens."),
    _spec("inter_token_latency_p95_seconds", float, "seconds", "95th percentile time between output tokens."),
    _spec("prompt_tokens_p50", float, "tokens", "Median prompt length of finished requests."),
    _spec("prompt_tokens_p95", float, "tokens", "95th percentile prompt length."),
    _spec("generation_tokens_p50", float, "tokens", "Median generated length of finished requests."),
    _spec("generation_tokens_p95", float, "tokens", "95th percentile generated length."),
    _spec("gpu_memory_used_gib", float, "GiB",
          "GPU memory in use (dcgm-exporter DCGM_FI_DEV_FB_USED), the highest seen."),
    _spec("gpu_memory_beyond_budget_gib", float, "GiB",
          "GPU memory in use beyond vLLM's reservation (gpu_memory_utilization x total): held by something else."),
)}
