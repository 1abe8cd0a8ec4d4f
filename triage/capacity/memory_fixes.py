"""Fixes for weights that do not fit, for memory taken outside vLLM's budget, and advice for what is not memory."""
from __future__ import annotations

import dataclasses
import math

from ..model import Fix
from ..vocabulary import default_gpu_memory_utilization
from .kv_fixes import tensor_parallel_sizes
from .model import version_tuple
from .registry import (
    DOCS_ENGINE_ARGS,
    DOCS_MEMORY,
    DOCS_TROUBLESHOOTING,
    HEADROOM_MARGIN_GIB,
    MIN_KV_SHARE_FOR_WEIGHTS,
    NO_USER_FIGURES,
    SAFETY_MARGIN_RATIO,
    Facts,
    UserFigures,
    floor2,
    geometry,
    names_another_process,
    other_processes_ruled_out,
    outcome,
    starts,
    value_of,
    verified,
    weight_needs,
    weights_needed,
)


def _utilization(facts: Facts) -> float:
    """The --gpu-memory-utilization the incident ran with: the log's, else its release's default."""
    return value_of(facts, "gpu_memory_utilization") or default_gpu_memory_utilization(
        version_tuple(value_of(facts, "vllm_version")))


# --- weights_dont_fit ---------------------------------------------------------------------------------


def tensor_parallel_for_weights(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """The smallest --tensor-parallel-size whose weight slice leaves room for activations and KV."""
    total, util = value_of(facts, "gpu_total_gib"), _utilization(facts)
    needed = weights_needed(facts, given)
    weights = needed.gib
    tp_now = value_of(facts, "tensor_parallel_size") or 1
    if not total or not weights:
        lacking = "the GPU's memory" if weights else "the weight size" if total \
            else "the weight size or the GPU's memory"
        return [Fix(action="Split the weights over more GPUs (--tensor-parallel-size)",
                    why=f"the log does not give {lacking}, so the count is unknown",
                    flag="--tensor-parallel-size", reference=DOCS_MEMORY, status="unchecked",
                    needs=weight_needs(facts, given))]
    room = total * util * (1 - MIN_KV_SHARE_FOR_WEIGHTS)
    sizes = tensor_parallel_sizes(facts, given, tp_now)
    tp = next((n for n in sizes if weights / n <= room), None)
    if tp is None:
        more = f"the {given.gpus} GPUs of this node (--gpus)" if given.gpus else "16 GPUs"
        return [Fix(action="Splitting the weights over more GPUs (--tensor-parallel-size)",
                    flag="--tensor-parallel-size",
                    why=f"the weights ({weights:.1f} GiB, {needed.how}) need more than {more} at this precision: "
                        "quantize or use a smaller model",
                    computed_from=("gpu_total_gib", "weights_gib"), reference=DOCS_MEMORY, status="not_enough")]
    qualifier = "at least " if needed.lower_bound else ""
    fix = Fix(action=f"--tensor-parallel-size {tp}", flag="--tensor-parallel-size", value=tp,
              why=f"{qualifier}{weights:.1f} GiB of weights ({needed.how}) over {tp} GPUs is "
                  f"{weights / tp:.1f} GiB each, "
                  f"leaving {1 - weights / tp / (total * util):.0%} of each GPU's {total * util:.1f} GiB budget "
                  "for activations and the KV cache",
              computed_from=("gpu_total_gib", "gpu_memory_utilization", "weights_gib", "allocated_gib",
                             "tried_to_allocate_gib", "model"), reference=DOCS_MEMORY)
    p = outcome(facts, given, tensor_parallel_size=tp)
    return [verified(fix, p, starts(p, facts, given), needs=weight_needs(facts, given))]


def smaller_weights(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """Smaller weights: 16-bit instead of float32, or FP8 / pre-quantized checkpoints."""
    dtype = str(value_of(facts, "dtype") or "").removeprefix("torch.")
    needed = weights_needed(facts, given)
    weights = needed.gib
    fixes = []
    if dtype in ("float32", "float"):
        fix = Fix(action="--dtype bfloat16", flag="--dtype", value="bfloat16",
                  why="the weights are loaded in float32, twice the size of bfloat16/float16 "
                      "(use --dtype half on GPUs older than Ampere)", computed_from=("dtype",),
                  reference=DOCS_ENGINE_ARGS)
        p = outcome(facts, given, dtype="bfloat16")
        fixes.append(verified(fix, p, starts(p, facts, given), needs=weight_needs(facts, given)))
    if not value_of(facts, "quantization"):
        exact = not needed.lower_bound and not needed.guess
        size = f" (about {weights / 2:.1f} GiB instead of {weights:.1f} GiB)" if weights and exact else ""
        fix = Fix(action="--quantization fp8", flag="--quantization", value="fp8",
                  why=f"FP8 weights take half the memory of 16-bit ones{size}; or serve a pre-quantized "
                      "(AWQ/GPTQ/FP8) checkpoint", computed_from=("weights_gib", "model"), reference=DOCS_MEMORY)
        p = outcome(facts, given, quantization="fp8", dtype="bfloat16" if dtype in ("float32", "float") else None)
        fixes.append(verified(fix, p, starts(p, facts, given), needs=weight_needs(facts, given)))
    return fixes


def cpu_offload(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """--cpu-offload-gb for the weights that do not fit on the GPU."""
    total, util = value_of(facts, "gpu_total_gib"), _utilization(facts)
    needed = weights_needed(facts, given)
    tp = value_of(facts, "tensor_parallel_size") or 1
    if not total or not needed.gib:
        return []
    excess = needed.gib / tp - total * util * (1 - MIN_KV_SHARE_FOR_WEIGHTS)
    if excess <= 0:
        return []
    gb = math.ceil(excess)
    fix = Fix(action=f"--cpu-offload-gb {gb}", flag="--cpu-offload-gb", value=gb,
              why=f"keeps {'at least ' if needed.lower_bound else ''}{gb} GiB of weights per GPU in CPU memory; "
                  "slow unless the CPU-GPU link is fast", computed_from=("gpu_total_gib", "weights_gib"),
              reference=DOCS_MEMORY)
    p = outcome(facts, given, cpu_offload_gb=gb)
    return [verified(fix, p, starts(p, facts, given), needs=weight_needs(facts, given))]


# --- external_pressure ---------------------------------------------------------------------------------

# Phases whose allocations come on top of vLLM's budget, already taken: a failed one needs room beside it.
_OUTSIDE_THE_BUDGET = frozenset({"cuda_graph_capture", "serving"})


def utilization_within_free_memory(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """The largest --gpu-memory-utilization the free memory allows (free / total minus a margin), leaving room for an
    allocation that failed outside the budget; none when that is not below the utilization the incident ran with."""
    total, free = value_of(facts, "gpu_total_gib"), value_of(facts, "free_gib")
    others = value_of(facts, "other_processes_gib")
    if not total:
        return [Fix(action="Lower --gpu-memory-utilization below the share of the GPU that is really free",
                    why="the GPU's total memory is not in the log", flag="--gpu-memory-utilization",
                    reference=DOCS_MEMORY, status="unchecked", needs=weight_needs(facts, given)[:1])]
    if value_of(facts, "failure_kind") == "free_memory_low" and free is not None:
        available, basis = free, f"{free:.2f} of {total:.2f} GiB were free at startup"
    elif others is not None:
        available, basis = total - others, f"other processes hold {others:.2f} of {total:.2f} GiB"
    elif (beyond := value_of(facts, "gpu_memory_beyond_budget_gib")) is not None and beyond > 0:
        available, basis = total - beyond, f"{beyond:.2f} of {total:.2f} GiB is in use beyond vLLM's reservation"
    else:
        return []
    tried = value_of(facts, "tried_to_allocate_gib")
    if tried is not None and value_of(facts, "failed_phase") in _OUTSIDE_THE_BUDGET:
        available -= tried + HEADROOM_MARGIN_GIB
        basis += f"; the {tried:.2f} GiB that failed (+{HEADROOM_MARGIN_GIB} GiB) needs room outside the budget"
    value = floor2(available / total - SAFETY_MARGIN_RATIO)
    current = value_of(facts, "gpu_memory_utilization")
    if current is not None and value >= current:
        return []                   # what the others hold does not limit the budget the incident ran with
    used = ("gpu_total_gib", "free_gib", "other_processes_gib", "gpu_memory_beyond_budget_gib",
            "tried_to_allocate_gib")
    if value <= 0.05:
        return [Fix(action="Free the GPU first: almost nothing is left for vLLM", why=basis, computed_from=used,
                    reference=DOCS_MEMORY)]
    p = outcome(facts, given, gpu_memory_utilization=value)
    needed = weights_needed(facts, given)
    if p.weights_gib and p.weights_gib > value * total * 0.9:
        source = "" if value_of(facts, "weights_gib") \
            else f" ({'at least; ' if needed.lower_bound else ''}{needed.how})"
        return [Fix(action="Lowering --gpu-memory-utilization cannot help: free the GPU",
                    why=f"{basis}; at {value:.2f} vLLM could use {value * total:.2f} GiB, less than the "
                        f"{p.weights_gib:.2f} GiB per GPU the weights alone take{source}",
                    computed_from=("gpu_total_gib", "other_processes_gib", "weights_gib", "model"),
                    reference=DOCS_MEMORY,
                    checked=not needed.guess, status="advice" if needed.guess else "checked")]
    fix = Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
              why=f"{basis}; {value:.2f} x {total:.2f} = {value * total:.2f} GiB fits with a "
                  f"{SAFETY_MARGIN_RATIO:.0%} margin", computed_from=used, reference=DOCS_MEMORY)
    fits_free = value * total <= available - SAFETY_MARGIN_RATIO * total + 1e-6
    runs = starts(p, facts, given)
    return [verified(fix, p, runs if fits_free else False, None if fits_free else "it does not fit the free memory",
                     needs=weight_needs(facts, given))]


def free_other_processes(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """Find and stop (or move) the other processes holding GPU memory: the first thing to do when the evidence
    names one, before any utilization number. Not offered when torch's figures leave other processes too little to
    matter, or less than the allocation that failed needed beyond what was free; when torch lists a process that
    may be vLLM itself, the fix is to find out which it is first."""
    if other_processes_ruled_out(facts):
        return []
    others = value_of(facts, "other_processes_gib") or value_of(facts, "gpu_memory_beyond_budget_gib")
    pids = value_of(facts, "other_process_pids")
    unidentified = facts.get("unidentified_processes_gib")
    caution = f"{unidentified.note}, so stop only a process that is not vLLM; " if unidentified is not None else ""
    if unidentified is not None and not names_another_process(facts):
        unsure = str(value_of(facts, "unidentified_process_pids"))
        check = (f"whether process {unsure} ({unidentified.value:.2f} GiB) is" if "," not in unsure
                 else f"which of processes {unsure} ({unidentified.value:.2f} GiB) is")
        return [Fix(action=f"Check {check} vLLM itself before stopping anything",
                    why=caution + "`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` on the "
                        "node (or `vtriage gpu`) names the process behind each PID",
                    computed_from=("unidentified_processes_gib", "unidentified_process_pids"),
                    reference=DOCS_TROUBLESHOOTING)]
    held = f" holding {others:.2f} GiB" if others and others > 0 else ""
    who = f"process {pids}" if pids and "," not in str(pids) \
        else f"processes {pids}" if pids else "the other process(es)"
    if value_of(facts, "platform") == "cpu":
        return [Fix(action=f"Find and stop or move {who}{held} on this host",
                    why="find them with `ps -eo pid,rss,comm --sort=-rss | head` and the NUMA node's use with "
                        "`numastat -m`; in Kubernetes, check the pod's memory limit and its neighbours",
                    computed_from=("other_processes_gib", "other_process_pids", "free_gib"),
                    reference=DOCS_TROUBLESHOOTING)]
    return [Fix(action=f"Find and stop or move {who}{held} on this GPU",
                why=caution + "list who holds the GPU with `nvidia-smi --query-compute-apps=pid,process_name,"
                    "used_memory --format=csv` (or `vtriage gpu` on the node); in Kubernetes, look for another "
                    "pod scheduled on the same GPU. Only once it is gone (or if it must stay) size "
                    "--gpu-memory-utilization to what is left",
                computed_from=("other_processes_gib", "other_process_pids", "gpu_memory_beyond_budget_gib"),
                reference=DOCS_TROUBLESHOOTING)]


def utilization_headroom(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """A lower --gpu-memory-utilization that leaves the failed allocation outside vLLM's budget."""
    total, util = value_of(facts, "gpu_total_gib"), value_of(facts, "gpu_memory_utilization")
    tried = value_of(facts, "tried_to_allocate_gib")
    if not total or not util or tried is None:
        missing = [n for n in ("gpu_total_gib", "gpu_memory_utilization", "tried_to_allocate_gib") if n not in facts]
        return [Fix(action="Lower --gpu-memory-utilization to leave headroom outside vLLM's budget",
                    why="the exact value needs " + ", ".join(missing), flag="--gpu-memory-utilization",
                    reference=DOCS_MEMORY)]
    value = floor2(util - (tried + HEADROOM_MARGIN_GIB) / total)
    if value <= 0.1:
        return []
    fix = Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
              why=f"leaves the {tried:.2f} GiB that failed (+{HEADROOM_MARGIN_GIB} GiB) outside vLLM's budget: "
                  f"{util:.2f} -> {value:.2f} of {total:.2f} GiB; the KV cache shrinks by "
                  f"{(util - value) * total:.2f} GiB",
              computed_from=("gpu_total_gib", "gpu_memory_utilization", "tried_to_allocate_gib"), reference=DOCS_MEMORY)
    p = outcome(facts, given, gpu_memory_utilization=value)
    return [verified(fix, p, starts(p, facts, given), needs=weight_needs(facts, given))]


def enforce_eager(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """--enforce-eager: no CUDA graphs, no graph memory."""
    if value_of(facts, "enforce_eager") is True:
        return []
    graphs = value_of(facts, "cuda_graph_gib") or value_of(facts, "private_pool_gib")
    saved = f" (graphs took {graphs:.2f} GiB)" if graphs else ""
    fix = Fix(action="--enforce-eager", flag="--enforce-eager", value=True,
              why=f"skips CUDA graph capture and its memory{saved}; costs some decode speed. Or capture fewer "
                  "sizes (compilation_config cudagraph_capture_sizes) or lower --max-num-seqs",
              computed_from=("cuda_graph_gib", "private_pool_gib"), reference=DOCS_MEMORY)
    p = outcome(facts, given, enforce_eager=True)
    removes_failure = value_of(facts, "failed_phase") == "cuda_graph_capture"
    fix = verified(fix, p, p.starts if removes_failure else False,
                   None if removes_failure else "the failure was not in CUDA graph capture")
    if fix.predicted and graphs and fix.status == "checked":
        freed = (" (the graph estimate returns to the KV cache)" if geometry(facts, given).graph_in_budget
                 else f"; the {graphs:.2f} GiB the graphs took outside the budget is not needed")
        fix = dataclasses.replace(fix, predicted={**fix.predicted, "summary": fix.predicted["summary"] + freed})
    return [fix]


# --- not memory -------------------------------------------------------------------------------------

_NON_MEMORY_ADVICE = {
    "nccl_error": ("Fix the NCCL / multi-GPU setup", "run with NCCL_DEBUG=INFO; in Docker use --ipc=host or a large "
                   "--shm-size; try NCCL_P2P_DISABLE=1 when GPUs lack peer access; check the NCCL version"),
    "nccl_timeout": ("Find the rank that stalled",
                     "a collective timed out: one rank hung or died first; check its log, "
                     "NCCL_DEBUG=INFO, and the network between nodes"),
    "model_not_found": ("Check the model id or path", "the repository or folder was not found: check spelling, the "
                        "mount, and that config.json is there"),
    "hub_unreachable": ("Check access to the Hugging Face Hub", "set HF_HUB_OFFLINE=1 with a pre-downloaded model, or "
                        "fix the proxy / network"),
    "hub_auth": ("Give the server a token with access, or check the model id",
                 "set HF_TOKEN for an account that accepted the model's licence; the Hub answers 401 for a "
                 "repository that does not exist, too"),
    "process_killed": ("Find what killed the process", "check the pod's last state (OOMKilled, exit code 137) and "
                       "the node's kernel log; if it was the OOM killer, give the container more host RAM or lower "
                       "--swap-space / --cpu-offload-gb"),
    "engine_hang": ("Find the rank that hung", "read the other processes' logs around the wait (an NCCL error or "
                    "timeout, a worker that died); py-spy dump the stuck processes; rerun with NCCL_DEBUG=INFO"),
    "unsupported_gpu": ("Use a dtype or quantization this GPU supports", "e.g. --dtype half on GPUs older than Ampere "
                        "(compute capability < 8.0)"),
    "no_gpu": ("Make a GPU visible to the container", "check the device plugin, --gpus all, and CUDA_VISIBLE_DEVICES"),
    "illegal_memory_access": ("Isolate the failing kernel", "rerun with --enforce-eager and CUDA_LAUNCH_BLOCKING=1; "
                              "upgrade vLLM; an illegal access is a bug or a bad kernel, not a memory shortage"),
    "cuda_error": ("Isolate the failing kernel", "rerun with CUDA_LAUNCH_BLOCKING=1 to see the real failing call"),
    "host_oom": ("Give the container more host RAM", "host memory, not GPU memory, ran out: raise the pod/container "
                 "memory limit, or lower --swap-space / --cpu-offload-gb"),
    "port_in_use": ("Free the port or pick another", "another process listens there; use --port"),
    "shared_memory": ("Give the container more shared memory", "--shm-size or an emptyDir medium: Memory at /dev/shm"),
    "config_error": ("Fix the configuration value the error names", "see the error line"),
}


def not_memory_advice(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """What to do about a failure that is not about GPU memory."""
    kind = value_of(facts, "failure_kind")
    if value_of(facts, "failed_in_scheduler") and kind in ("exception", "unidentified_error", "engine_died"):
        function = value_of(facts, "failed_function")
        return [Fix(action="Upgrade vLLM, or report the scheduler's traceback",
                    why=f"the scheduler raised{f' in {function}' if function else ''} while it placed requests in the "
                        "KV cache: a bug or an inconsistent state in this release, not a memory shortage. Fewer "
                        "requests at once (--max-num-seqs) only makes the path that failed rarer",
                    computed_from=("failure_kind", "failed_function"), reference=DOCS_TROUBLESHOOTING)]
    action, why = _NON_MEMORY_ADVICE.get(kind, ("Read the root error line above", "it is not a GPU memory problem; "
                                                "changing memory flags will not help"))
    return [Fix(action=action, why=why, computed_from=("failure_kind",), reference=DOCS_TROUBLESHOOTING)]


# --- the profiling run --------------------------------------------------------------------------------

# Names of model families whose profiling run also pushes images or audio through an encoder: the dummy batch
# holds the most items --limit-mm-per-prompt allows, so that limit sizes the activation peak too.
_MULTIMODAL_NAMES = ("-vl", "vl-", "vision", "llava", "pixtral", "idefics", "paligemma", "internvl", "minicpm-v",
                     "mllama", "molmo", "qwen2-audio", "whisper", "omni", "gemma-3-", "phi-4-multimodal", "kimi-vl")


def smaller_profile_batch(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """A smaller profiling batch: for a multimodal model fewer items per prompt (--limit-mm-per-prompt: the encoder's
    dummy batch is usually the largest part), fewer tokens per step (--max-num-batched-tokens), fewer sequences
    (--max-num-seqs, the sampler's warm-up batch). Each halves what the server had, where the log shows it; the
    activation peak they lower is not modelled, so they stay unchecked."""
    fixes = []
    model = str(value_of(facts, "model") or "").lower()
    if any(name in model for name in _MULTIMODAL_NAMES):
        medium = "audio" if "whisper" in model or "audio" in model else "image"
        modern = (version_tuple(value_of(facts, "vllm_version")) or (1,)) >= (0, 10)
        limit = f'{{"{medium}": 1}}' if modern else f"{medium}=1"
        fixes.append(Fix(action=f"--limit-mm-per-prompt '{limit}'", flag="--limit-mm-per-prompt", value=limit,
                         why=f"the profiling run encodes the most {medium} items a prompt may carry; one per prompt "
                             "shrinks the encoder's dummy batch (raise it again as far as it fits)",
                         computed_from=("model",), reference=DOCS_MEMORY))
    batch = value_of(facts, "max_num_batched_tokens") or value_of(facts, "profile_batch_tokens")
    if batch:
        value = max(512, int(batch) // 2)
        fixes.append(Fix(action=f"--max-num-batched-tokens {value}", flag="--max-num-batched-tokens", value=value,
                         why=f"half the {int(batch):,} tokens the profiling run pushed through the model in one step: "
                             "its activations are what ran out; costs some prefill throughput",
                         computed_from=("max_num_batched_tokens", "profile_batch_tokens"), reference=DOCS_MEMORY))
    else:
        fixes.append(Fix(action="Lower --max-num-batched-tokens", flag="--max-num-batched-tokens",
                         why="the profiling run pushes one step of that many tokens through the model; the log does "
                             "not show the value it ran with", reference=DOCS_MEMORY))
    seqs = value_of(facts, "max_num_seqs")
    if seqs and seqs > 1:
        value = max(1, int(seqs) // 2)
        fixes.append(Fix(action=f"--max-num-seqs {value}", flag="--max-num-seqs", value=value,
                         why=f"half the {int(seqs)} sequences the sampler's warm-up and the dummy batch hold at once",
                         computed_from=("max_num_seqs",), reference=DOCS_MEMORY))
    else:
        fixes.append(Fix(action="Lower --max-num-seqs", flag="--max-num-seqs",
                         why="the sampler's warm-up runs that many dummy requests at once", reference=DOCS_MEMORY))
    return fixes
