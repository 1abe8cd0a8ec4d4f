"""Fixes for the CPU backend, where host RAM is the device memory: the KV cache's size is
VLLM_CPU_KVCACHE_SPACE (whole GiB) or --kv-cache-memory-bytes, and --gpu-memory-utilization is the share
of the NUMA node's memory vLLM reserves when neither is set. Each solver returns nothing off the CPU."""
from __future__ import annotations

import math

from ..model import Fix
from .registry import DOCS_MEMORY, NO_USER_FIGURES, Facts, UserFigures, floor2, value_of

DOCS_CPU = "https://docs.vllm.ai/en/latest/getting_started/installation/cpu/"
CPU_FREE_MARGIN = 0.1          # of the free memory, kept for the worker's own growth and the OS
GIB_BYTES = 2**30


def _on_cpu(facts: Facts) -> bool:
    return value_of(facts, "platform") == "cpu"


def _space(gib: int) -> Fix:
    return Fix(action=f"VLLM_CPU_KVCACHE_SPACE={gib}", flag="VLLM_CPU_KVCACHE_SPACE", value=gib,
               why="", reference=DOCS_CPU)


def cpu_kv_space_within_free(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """The largest whole-GiB KV cache the node's free memory holds."""
    if not _on_cpu(facts):
        return []
    free, asked, total = (value_of(facts, k) for k in ("free_gib", "kv_requested_gib", "gpu_total_gib"))
    if free is None:
        return [Fix(action="Lower VLLM_CPU_KVCACHE_SPACE (or --kv-cache-memory-bytes) to what the node has free",
                    why="the free memory is not in the log", flag="VLLM_CPU_KVCACHE_SPACE", reference=DOCS_CPU)]
    value = math.floor(free * (1 - CPU_FREE_MARGIN))
    if value < 1:
        return [Fix(action="Free host memory first: less than 1 GiB is left for the KV cache",
                    why=f"{free:.2f} GiB was free when vLLM allocated the KV cache", computed_from=("free_gib",),
                    reference=DOCS_CPU)]
    node = f" of the node's {total:.2f} GiB" if total else ""
    asked_text = f" instead of the {asked:g} GiB asked for" if asked is not None and asked > 0 else ""
    fix = _space(value)
    needed = value_of(facts, "kv_needed_gib")
    status = "unchecked" if needed is None else "checked" if value >= needed else "not_enough"
    return [Fix(action=fix.action, flag=fix.flag, value=value,
                why=f"{free:.2f} GiB{node} was free after the weights loaded; {value} GiB{asked_text} leaves "
                    f"{CPU_FREE_MARGIN:.0%} of it for the worker (equivalently --kv-cache-memory-bytes "
                    f"{value * GIB_BYTES})"
                    + (f"; one max_model_len request needs {needed:g} GiB" if needed is not None else ""),
                computed_from=("free_gib", "kv_requested_gib", "gpu_total_gib"), reference=DOCS_CPU,
                status=status, checked=status == "checked",
                predicted=None if needed is None else {
                    "summary": f"KV cache {value} GiB within the {free:.2f} GiB free; one max_model_len request needs "
                               f"{needed:g} GiB: {'it fits' if value >= needed else 'it does not fit'}",
                    "starts": value >= needed, "kv_cache_gib": value})]


def cpu_utilization_within_free(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """On CPU, --gpu-memory-utilization is the share of the NUMA node's memory vLLM reserves."""
    if not _on_cpu(facts):
        return []
    free, total = value_of(facts, "free_gib"), value_of(facts, "gpu_total_gib")
    if free is None or not total:
        return []
    value = floor2(free / total - 0.02)
    if value <= 0.05:
        return [Fix(action="Free host memory first: almost nothing of the node is free",
                    why=f"{free:.2f} of {total:.2f} GiB free", computed_from=("free_gib", "gpu_total_gib"),
                    reference=DOCS_CPU)]
    return [Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
                why=f"on the CPU backend this is the share of the NUMA node's memory vLLM reserves: {free:.2f} of "
                    f"{total:.2f} GiB were free, so {value:.2f} x {total:.2f} = {value * total:.2f} GiB "
                    "fits with a margin; or size the KV cache yourself with VLLM_CPU_KVCACHE_SPACE",
                computed_from=("free_gib", "gpu_total_gib"), reference=DOCS_CPU)]


def cpu_kv_space_for_max_model_len(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """The whole-GiB KV cache that holds one max_model_len request, with the block vLLM holds back."""
    if not _on_cpu(facts):
        return []
    needed, total = value_of(facts, "kv_needed_gib"), value_of(facts, "gpu_total_gib")
    if not needed or needed <= 0:
        return []
    value = math.ceil(needed * 1.01)
    room = f"; the node has {total:.2f} GiB" if total else "; check that the node has that much free"
    if total and value > total * (1 - CPU_FREE_MARGIN):
        return [Fix(action="Raising VLLM_CPU_KVCACHE_SPACE",
                    why=f"no size fits: {value} GiB would be needed, more than this node can give (one request of "
                        f"max_model_len needs {needed:g} GiB of KV cache{room}); lower --max-model-len",
                    computed_from=("kv_needed_gib", "gpu_total_gib"), reference=DOCS_MEMORY, status="not_enough")]
    return [Fix(action=f"VLLM_CPU_KVCACHE_SPACE={value}", flag="VLLM_CPU_KVCACHE_SPACE", value=value,
                why=f"one request of max_model_len needs {needed:g} GiB of KV cache, plus the block "
                    f"vLLM holds back{room} (or --kv-cache-memory-bytes {value * GIB_BYTES})",
                computed_from=("kv_needed_gib", "kv_cache_gib", "gpu_total_gib"), reference=DOCS_CPU,
                status="checked" if total else "unchecked", checked=bool(total),
                needs=() if total else ("--gpu-memory-gib GIB (the node's memory)",),
                predicted={"summary": f"KV cache {value} GiB: one max_model_len request ({needed:g} GiB) fits"
                                      + (f", within the node's {total:.2f} GiB" if total else ""),
                           "starts": True if total else None, "kv_cache_gib": value})]


def cpu_kv_space_for_load(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """A larger KV cache for a CPU server that preempts: twice what it has, within the node."""
    if not _on_cpu(facts):
        return []
    kv, total = value_of(facts, "kv_cache_gib"), value_of(facts, "gpu_total_gib")
    if kv is None or kv <= 0:
        return [Fix(action="Give the KV cache more host memory: raise VLLM_CPU_KVCACHE_SPACE (or "
                           "--kv-cache-memory-bytes)",
                    why="the KV cache's present size is not in the log; each doubling roughly doubles the requests "
                        "that fit at once", flag="VLLM_CPU_KVCACHE_SPACE", reference=DOCS_CPU)]
    value = max(1, math.ceil(kv * 2))
    if total and value > total * (1 - CPU_FREE_MARGIN):
        return []
    node = f", within the node's {total:.2f} GiB" if total else "; check that the node has it free"
    return [Fix(action=f"VLLM_CPU_KVCACHE_SPACE={value}", flag="VLLM_CPU_KVCACHE_SPACE", value=value,
                why=f"twice the {kv:g} GiB KV cache{node}: about twice the requests fit before preemption "
                    f"(or --kv-cache-memory-bytes {value * GIB_BYTES})",
                computed_from=("kv_cache_gib", "gpu_total_gib"), reference=DOCS_CPU)]
