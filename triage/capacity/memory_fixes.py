"""Fixes for weights that do not fit, for memory taken outside vLLM's budget, and advice for what is not memory."""
from __future__ import annotations

import dataclasses
import math

from ..model import Fix
from .registry import (DOCS_ENGINE_ARGS, DOCS_MEMORY, DOCS_TROUBLESHOOTING, HEADROOM_MARGIN_GIB,
                       MIN_KV_SHARE_FOR_WEIGHTS, SAFETY_MARGIN_RATIO, Facts, floor2, geometry, outcome, solver, starts, value_of,
                       verified, weights_needed)

# --- weights_dont_fit ---------------------------------------------------------------------------------


@solver("tensor_parallel_for_weights")
def tensor_parallel_for_weights(facts: Facts) -> list[Fix]:
    """The smallest --tensor-parallel-size whose weight slice leaves room for activations and KV."""
    total, util = value_of(facts, "gpu_total_gib"), value_of(facts, "gpu_memory_utilization") or 0.9
    weights, how, lower_bound = weights_needed(facts)
    tp_now = value_of(facts, "tensor_parallel_size") or 1
    if not total or not weights:
        return [Fix(action="Split the weights over more GPUs (--tensor-parallel-size)",
                    why="the log does not give the weight size or the GPU size, so the count is unknown",
                    flag="--tensor-parallel-size", reference=DOCS_MEMORY)]
    room = total * util * (1 - MIN_KV_SHARE_FOR_WEIGHTS)
    tp = next((n for n in (1, 2, 4, 8, 16) if n > tp_now and weights / n <= room), None)
    if tp is None:
        return [Fix(action="The weights need more than 16 GPUs at this precision: quantize or use a smaller model",
                    why=f"weights {weights:.1f} GiB ({how})", computed_from=("gpu_total_gib", "weights_gib"),
                    reference=DOCS_MEMORY)]
    qualifier = "at least " if lower_bound else ""
    fix = Fix(action=f"--tensor-parallel-size {tp}", flag="--tensor-parallel-size", value=tp,
              why=f"{qualifier}{weights:.1f} GiB of weights ({how}) over {tp} GPUs is {weights / tp:.1f} GiB each, "
                  f"leaving {1 - weights / tp / (total * util):.0%} of each GPU's {total * util:.1f} GiB budget "
                  "for activations and the KV cache",
              computed_from=("gpu_total_gib", "gpu_memory_utilization", "weights_gib", "allocated_gib",
                             "tried_to_allocate_gib", "model"), reference=DOCS_MEMORY)
    p = outcome(facts, tensor_parallel_size=tp)
    return [verified(fix, p, starts(p, facts))]


@solver("smaller_weights")
def smaller_weights(facts: Facts) -> list[Fix]:
    """Smaller weights: 16-bit instead of float32, or FP8 / pre-quantized checkpoints."""
    dtype = str(value_of(facts, "dtype") or "").removeprefix("torch.")
    weights, how, lower_bound = weights_needed(facts)
    fixes = []
    if dtype in ("float32", "float"):
        fix = Fix(action="--dtype bfloat16", flag="--dtype", value="bfloat16",
                  why="the weights are loaded in float32, twice the size of bfloat16/float16 "
                      "(use --dtype half on GPUs older than Ampere)", computed_from=("dtype",), reference=DOCS_ENGINE_ARGS)
        p = outcome(facts, dtype="bfloat16")
        fixes.append(verified(fix, p, starts(p, facts)))
    if not value_of(facts, "quantization"):
        size = f" (about {weights / 2:.1f} GiB instead of {weights:.1f} GiB)" if weights and not lower_bound else ""
        fix = Fix(action="--quantization fp8", flag="--quantization", value="fp8",
                  why=f"FP8 weights take half the memory of 16-bit ones{size}; or serve a pre-quantized "
                      "(AWQ/GPTQ/FP8) checkpoint", computed_from=("weights_gib", "model"), reference=DOCS_MEMORY)
        p = outcome(facts, quantization="fp8", dtype="bfloat16" if dtype in ("float32", "float") else None)
        fixes.append(verified(fix, p, starts(p, facts)))
    return fixes


@solver("cpu_offload")
def cpu_offload(facts: Facts) -> list[Fix]:
    """--cpu-offload-gb for the weights that do not fit on the GPU."""
    total, util = value_of(facts, "gpu_total_gib"), value_of(facts, "gpu_memory_utilization") or 0.9
    weights, how, lower_bound = weights_needed(facts)
    tp = value_of(facts, "tensor_parallel_size") or 1
    if not total or not weights:
        return []
    excess = weights / tp - total * util * (1 - MIN_KV_SHARE_FOR_WEIGHTS)
    if excess <= 0:
        return []
    gb = math.ceil(excess)
    fix = Fix(action=f"--cpu-offload-gb {gb}", flag="--cpu-offload-gb", value=gb,
              why=f"keeps {'at least ' if lower_bound else ''}{gb} GiB of weights per GPU in CPU memory; "
                  "slow unless the CPU-GPU link is fast", computed_from=("gpu_total_gib", "weights_gib"),
              reference=DOCS_MEMORY)
    p = outcome(facts, cpu_offload_gb=gb)
    return [verified(fix, p, starts(p, facts))]


# --- external_pressure ---------------------------------------------------------------------------------

@solver("utilization_within_free_memory")
def utilization_within_free_memory(facts: Facts) -> list[Fix]:
    """The largest --gpu-memory-utilization the free memory allows (free / total minus a margin)."""
    total, free, others = value_of(facts, "gpu_total_gib"), value_of(facts, "free_gib"), value_of(facts, "other_processes_gib")
    if not total:
        return [Fix(action="Lower --gpu-memory-utilization below the share of the GPU that is really free",
                    why="the GPU's total memory is not in the log", flag="--gpu-memory-utilization",
                    reference=DOCS_MEMORY)]
    if value_of(facts, "failure_kind") == "free_memory_low" and free is not None:
        available, basis = free, f"{free:.2f} of {total:.2f} GiB were free at startup"
    elif others is not None:
        available, basis = total - others, f"other processes hold {others:.2f} of {total:.2f} GiB"
    elif (beyond := value_of(facts, "gpu_memory_beyond_budget_gib")) is not None and beyond > 0:
        available, basis = total - beyond, f"{beyond:.2f} of {total:.2f} GiB is in use beyond vLLM's reservation"
    else:
        return []
    value = floor2(available / total - SAFETY_MARGIN_RATIO)
    used = ("gpu_total_gib", "free_gib", "other_processes_gib", "gpu_memory_beyond_budget_gib")
    if value <= 0.05:
        return [Fix(action="Free the GPU first: almost nothing is left for vLLM", why=basis, computed_from=used,
                    reference=DOCS_MEMORY)]
    p = outcome(facts, gpu_memory_utilization=value)
    _, how, lower_bound = weights_needed(facts)
    if p.weights_gib and p.weights_gib > value * total * 0.9:
        source = "" if value_of(facts, "weights_gib") else f" ({'at least; ' if lower_bound else ''}{how})"
        return [Fix(action="Lowering --gpu-memory-utilization cannot help: free the GPU",
                    why=f"{basis}; at {value:.2f} vLLM could use {value * total:.2f} GiB, less than the "
                        f"{p.weights_gib:.2f} GiB per GPU the weights alone take{source}",
                    computed_from=("gpu_total_gib", "other_processes_gib", "weights_gib", "model"), reference=DOCS_MEMORY,
                    checked=True)]
    fix = Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
              why=f"{basis}; {value:.2f} x {total:.2f} = {value * total:.2f} GiB fits with a "
                  f"{SAFETY_MARGIN_RATIO:.0%} margin", computed_from=used, reference=DOCS_MEMORY)
    fits_free = value * total <= available - SAFETY_MARGIN_RATIO * total + 1e-6
    return [verified(fix, p, fits_free and starts(p, facts))]


@solver("free_other_processes")
def free_other_processes(facts: Facts) -> list[Fix]:
    """Stop or move the other processes holding GPU memory."""
    others = value_of(facts, "other_processes_gib") or value_of(facts, "gpu_memory_beyond_budget_gib")
    held = f" holding {others:.2f} GiB" if others and others > 0 else ""
    return [Fix(action=f"Stop or move the other process(es){held} on this GPU",
                why="find them with `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`; "
                    "in Kubernetes, check for another pod scheduled on the same GPU",
                computed_from=("other_processes_gib", "gpu_memory_beyond_budget_gib"), reference=DOCS_TROUBLESHOOTING)]


@solver("utilization_headroom")
def utilization_headroom(facts: Facts) -> list[Fix]:
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
                  f"{util:.2f} -> {value:.2f} of {total:.2f} GiB; the KV cache shrinks by {(util - value) * total:.2f} GiB",
              computed_from=("gpu_total_gib", "gpu_memory_utilization", "tried_to_allocate_gib"), reference=DOCS_MEMORY)
    p = outcome(facts, gpu_memory_utilization=value)
    return [verified(fix, p, starts(p, facts))]


@solver("enforce_eager")
def enforce_eager(facts: Facts) -> list[Fix]:
    """--enforce-eager: no CUDA graphs, no graph memory."""
    if value_of(facts, "enforce_eager") is True:
        return []
    graphs = value_of(facts, "cuda_graph_gib") or value_of(facts, "private_pool_gib")
    saved = f" (graphs took {graphs:.2f} GiB)" if graphs else ""
    fix = Fix(action="--enforce-eager", flag="--enforce-eager", value=True,
              why=f"skips CUDA graph capture and its memory{saved}; costs some decode speed. Or capture fewer "
                  "sizes (compilation_config cudagraph_capture_sizes) or lower --max-num-seqs",
              computed_from=("cuda_graph_gib", "private_pool_gib"), reference=DOCS_MEMORY)
    p = outcome(facts, enforce_eager=True)
    removes_failure = value_of(facts, "failed_phase") == "cuda_graph_capture"
    fix = verified(fix, p, removes_failure and p.starts is True)
    if fix.predicted and graphs:
        freed = (" (the graph estimate returns to the KV cache)" if geometry(facts).graph_in_budget
                 else f"; the {graphs:.2f} GiB the graphs took outside the budget is not needed")
        fix = dataclasses.replace(fix, predicted={**fix.predicted, "summary": fix.predicted["summary"] + freed})
    return [fix]


# --- not memory -------------------------------------------------------------------------------------

_NON_MEMORY_ADVICE = {
    "nccl_error": ("Fix the NCCL / multi-GPU setup", "run with NCCL_DEBUG=INFO; in Docker use --ipc=host or a large "
                   "--shm-size; try NCCL_P2P_DISABLE=1 when GPUs lack peer access; check the NCCL version"),
    "nccl_timeout": ("Find the rank that stalled", "a collective timed out: one rank hung or died first; check its log, "
                     "NCCL_DEBUG=INFO, and the network between nodes"),
    "model_not_found": ("Check the model id or path", "the repository or folder was not found: check spelling, the "
                        "mount, and that config.json is there"),
    "hub_unreachable": ("Check access to the Hugging Face Hub", "set HF_HUB_OFFLINE=1 with a pre-downloaded model, or "
                        "fix the proxy / network"),
    "hub_auth": ("Give the server a token with access", "set HF_TOKEN for an account that accepted the model's licence"),
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


@solver("not_memory_advice")
def not_memory_advice(facts: Facts) -> list[Fix]:
    """What to do about a failure that is not about GPU memory."""
    kind = value_of(facts, "failure_kind")
    action, why = _NON_MEMORY_ADVICE.get(kind, ("Read the root error line above", "it is not a GPU memory problem; "
                                                "changing memory flags will not help"))
    return [Fix(action=action, why=why, computed_from=("failure_kind",), reference=DOCS_TROUBLESHOOTING)]
