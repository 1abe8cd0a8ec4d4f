"""The closed vocabulary every stage shares: verdicts, phases, event and failure kinds, thresholds
and vLLM's defaults by version, defined once here.

Rules and signatures are data that name these words; they are checked against this module when they
load (ruleset.py, signatures.py), so a typo is a load error with a "did you mean", not a rule that
never fires. A verdict's title and severity are the verdict class's own (rules/classes/*.toml); the
verdicts themselves, in reading order, are named here and every class file must match one.
"""
from __future__ import annotations

from typing import Mapping

# The verdicts, in the order a person reads them (the memory classes first). rules/classes/ holds one
# file per verdict, with its title and severity; ruleset.py refuses a class or rule naming another.
VERDICTS: tuple[str, ...] = (
    "weights_dont_fit",
    "kv_cache_too_small",
    "external_pressure",
    "preemption_slowdown",
    "healthy",
    "other_failure",
    "inconclusive",
)
UNDECIDED = "inconclusive"      # what is left when nothing decides: never "ruled out"
# The memory classes: where the evidence names another process on the GPU, freeing it is their first fix.
MEMORY_VERDICTS = frozenset({"weights_dont_fit", "kv_cache_too_small", "external_pressure", "preemption_slowdown"})
CONFIDENCES: tuple[str, ...] = ("low", "medium", "high")
# How bad a verdict is, mildest first (set per verdict in rules/classes/*.toml); --fail-on gates on it.
SEVERITIES: tuple[str, ...] = ("ok", "info", "warning", "critical")
PROBLEM_SEVERITY = "warning"    # from here up a verdict is a problem to act on


def problems_first(severity_of: Mapping[str, str]) -> tuple[str, ...]:
    """The verdicts with the problems (severity warning and up) first, then the rest, each group in
    VERDICTS order: the order in which a report lists the classes it ruled out."""
    floor = SEVERITIES.index(PROBLEM_SEVERITY)
    return tuple(sorted(VERDICTS, key=lambda v: (SEVERITIES.index(severity_of[v]) < floor, VERDICTS.index(v))))


# vLLM's release bands, as its log formats tell them apart: each signature gives a line as every band it
# exists in prints it.
RELEASE_BANDS: Mapping[str, str] = {
    "v0-old": "the V0 engine, 0.2.0 - 0.4.x (file.py:N] prefix, no process prefixes before 0.4.2)",
    "v0-late": "the V0 engine, 0.5.0 - 0.10.2 (VllmWorkerProcess prefixes; [file.py:N] from 0.8.0)",
    "v1": "the V1 engine, 0.8.0 - newest (EngineCore, APIServer and Worker prefixes)",
}
# The first release of each band: a log that names no version has its fixes and command checked against the
# oldest release its formats allow, so no flag is offered that its release may lack.
RELEASE_BAND_FIRST: Mapping[str, str] = {"v0-old": "0.2.0", "v0-late": "0.5.0", "v1": "0.8.0"}

# The phases of a vLLM startup, in the order they happen. A failure's phase is evidence.
PHASES: tuple[str, ...] = (
    "initialization",       # process and device set-up, the free-memory check, NCCL init
    "loading_weights",
    "memory_profiling",
    "kv_cache_allocation",
    "cuda_graph_capture",   # graph capture and warm-up, after the KV cache was sized
    "serving",
)
PHASE_RANK: Mapping[str, int] = {p: i for i, p in enumerate(PHASES)}

# What a signature may say its line is (`kind`): rules/signatures/*.toml may use only these.
EVENT_KINDS: frozenset[str] = frozenset({
    # settings and versions
    "args", "auto_fit", "engine_config", "max_model_len", "model_name", "platform", "version",
    # startup progress and figures
    "load_start", "shard_progress", "weights_progress", "weights_loaded", "checkpoint_size",
    "memory_profile", "memory_usage", "kv_available", "kv_cache_size", "gpu_blocks", "max_concurrency",
    "cuda_graph_profiling", "cuda_graph_pool", "graph_capture", "graph_captured", "graph_hint",
    "long_context_warning", "engine_ready", "server_up",
    # serving
    "stats", "preemption", "serving_progress", "request", "shutdown",
    # failures and their tracebacks
    "cuda_oom", "cuda_error", "config_error", "engine_died", "engine_hang", "exception", "free_memory_low", "host_oom",
    "hub_auth", "kv_memory_low", "kv_too_small", "memory_profiling_error", "model_not_found", "nccl_error",
    "no_cache_blocks", "no_gpu", "port_in_use", "request_rejected", "shared_memory", "unsupported_gpu",
    "weights_load_failed", "worker_error", "traceback_start", "traceback_frame",
})

# What a signature may say failed (`failure`), and so the values of the fact failure_kind.
FAILURE_KINDS: frozenset[str] = frozenset({
    "config_error", "cuda_error", "cuda_oom", "engine_died", "engine_hang", "exception", "free_memory_low", "host_oom",
    "hub_auth", "hub_unreachable", "illegal_memory_access", "kv_memory_low", "kv_too_small",
    "memory_profiling_error", "model_not_found", "nccl_error", "nccl_timeout", "no_cache_blocks", "no_gpu",
    "port_in_use", "process_killed", "request_rejected", "shared_memory", "swap_exhausted", "unidentified_error",
    "unsupported_gpu",
})
# Failures of GPU memory or of vLLM's memory sizing.
MEMORY_FAILURES = frozenset({"cuda_oom", "kv_too_small", "no_cache_blocks", "free_memory_low", "kv_memory_low",
                             "memory_profiling_error", "swap_exhausted"})
# Failures that say something broke but not what: a specific failure on any line explains them.
GENERIC_FAILURES = frozenset({"exception", "unidentified_error", "engine_died", "engine_hang"})
# Failures of one request the server refuses and goes on from (a prompt longer than max_model_len).
REQUEST_FAILURES = frozenset({"request_rejected"})

# The fixes a rule may name (`fixes = [...]`); triage/capacity/fixes.py's FIXES holds a solver for each.
# Rules are checked against these names without loading the capacity model (a healthy log needs none).
FIX_NAMES: frozenset[str] = frozenset({
    "max_model_len_that_fits", "utilization_for_max_model_len", "kv_cache_dtype_fp8", "tensor_parallel_for_kv",
    "max_num_seqs_for_kv", "more_kv_for_preemption", "more_gpus_for_preemption", "tensor_parallel_for_weights",
    "smaller_weights",
    "cpu_offload", "utilization_within_free_memory", "free_other_processes", "utilization_headroom",
    "enforce_eager", "not_memory_advice", "cpu_kv_space_within_free", "cpu_utilization_within_free",
    "cpu_kv_space_for_max_model_len", "cpu_kv_space_for_load", "more_swap_space",
    "smaller_profile_batch",
})

# The facts whose values are words of this vocabulary: a rule comparing them to anything else is a typo.
FACT_VALUES: Mapping[str, frozenset[str]] = {
    "failure_kind": FAILURE_KINDS,
    "failed_phase": frozenset(PHASES),
    "reached_phase": frozenset(PHASES),
}

# How prose names those words ("it failed during weight loading", "a GPU memory error (CUDA out of
# memory)"): a report is read by people, the ids are for rules and JSON.
PHASE_WORDS: Mapping[str, str] = {
    "initialization": "initialization", "loading_weights": "weight loading", "memory_profiling": "memory profiling",
    "kv_cache_allocation": "KV cache sizing", "cuda_graph_capture": "CUDA graph capture", "serving": "serving",
}
FAILURE_WORDS: Mapping[str, str] = {
    "config_error": "a configuration error", "cuda_error": "a CUDA error", "cuda_oom": "CUDA out of memory",
    "engine_died": "the engine died", "engine_hang": "a process waiting on a hung one", "exception": "an exception",
    "free_memory_low": "too little free GPU memory",
    "host_oom": "host memory exhausted", "hub_auth": "Hugging Face authentication", "hub_unreachable":
    "Hugging Face unreachable", "illegal_memory_access": "an illegal memory access", "kv_memory_low":
    "too little memory for the KV cache", "kv_too_small": "KV cache smaller than max_model_len",
    "memory_profiling_error": "memory profiling disturbed", "model_not_found": "model not found",
    "nccl_error": "an NCCL error", "nccl_timeout": "an NCCL timeout",
    "no_cache_blocks": "no memory left for KV cache blocks",
    "no_gpu": "no GPU found", "port_in_use": "port in use",
    "process_killed": "a process killed by SIGKILL (often the kernel's OOM killer)",
    "request_rejected": "a request refused",
    "shared_memory": "shared memory exhausted", "swap_exhausted": "the KV cache's CPU swap space exhausted",
    "unidentified_error": "an error whose type is cut off",
    "unsupported_gpu": "an unsupported GPU",
}
VALUE_WORDS: Mapping[str, Mapping[str, str]] = {
    "failure_kind": FAILURE_WORDS, "failed_phase": PHASE_WORDS, "reached_phase": PHASE_WORDS,
}

# The most of one /metrics body read, saved or answered, after decompression: a big vLLM one is a few MiB.
MAX_METRICS_BYTES = 64 << 20
CONFIG_NAME = ".vtriage.toml"   # the team's suppressions and runbook URL, looked for from the working directory up

# KV cache usage (0-1) from which a stats interval or a scrape counts as a full cache (the rules', the alerts' and
# the decision card's line). A waiting request is admitted only when the free blocks hold its prompt, so a queue
# already waits on the cache from about 90 %: a long prompt does not fit the last tenth.
KV_SATURATED = 0.90
# The thresholds rules name instead of copying a number: a condition's `value = "kv_saturated"`, a template's
# `{kv_saturated:.0%}`.
THRESHOLDS: Mapping[str, float] = {"kv_saturated": KV_SATURATED}
# Memory another process must hold before it is named as the culprit (less is the CUDA context's noise).
OTHER_PROCESS_NOTABLE_GIB = 0.5
# The stats-line fields whose peak a merged stats interval keeps (the others: the later line's, or summed).
STATS_PEAKS = ("kv_usage", "running", "waiting", "swapped", "cpu_kv_usage")
DEFAULT_BLOCK_SIZE = 16         # tokens per KV cache block when the log does not say


# From this release vLLM sizes its CUDA graphs inside the memory budget and raised the default
# --gpu-memory-utilization from 0.9 to 0.92 to make room for them.
GRAPH_BUDGET_RELEASE: tuple[int, ...] = (0, 20)


def default_gpu_memory_utilization(version: tuple[int, ...] | None) -> float:
    """vLLM's default --gpu-memory-utilization in `version`: 0.9, and 0.92 from 0.20. An unknown
    version counts as an older one: callers that model a current release pass GRAPH_BUDGET_RELEASE."""
    return 0.92 if version is not None and version >= GRAPH_BUDGET_RELEASE else 0.9
