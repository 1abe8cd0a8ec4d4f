"""The numbers in the fixes: vLLM's memory budget, rebuilt from the incident's own figures.

vLLM reserves `gpu_memory_utilization x total` of the GPU; weights, the profiled activation peak,
non-torch memory (and from 0.20 the CUDA graph estimate) come out of that budget, and the rest is
the KV cache. The log prints enough of these to solve for any one knob. Every solver below names
the facts it used; when a figure is missing it says so instead of guessing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import regex

from ..model import Fact, Fix

DOCS_MEMORY = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"
DOCS_PREEMPTION = "https://docs.vllm.ai/en/latest/configuration/optimization/#preemption"
DOCS_FP8_KV = "https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache/"
DOCS_ENGINE_ARGS = "https://docs.vllm.ai/en/latest/configuration/engine_args/"
DOCS_TROUBLESHOOTING = "https://docs.vllm.ai/en/latest/usage/troubleshooting/"

SAFETY_MARGIN_RATIO = 0.02        # kept free of the GPU when raising or capping utilization
HEADROOM_MARGIN_GIB = 0.5         # beyond the failed allocation when lowering utilization
MAX_PRACTICAL_UTILIZATION = 0.95
MIN_KV_SHARE_FOR_WEIGHTS = 0.25   # a TP size must leave this share of the budget for activations and KV
DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "torch.float32": 4.0, "bfloat16": 2.0, "torch.bfloat16": 2.0,
               "float16": 2.0, "half": 2.0, "torch.float16": 2.0, "auto": 2.0}
QUANT_BYTES = {"fp8": 1.0, "fp8_e4m3": 1.0, "awq": 0.5, "awq_marlin": 0.5, "gptq": 0.5, "gptq_marlin": 0.5,
               "bitsandbytes": 0.5, "compressed-tensors": None, "gguf": None}

Facts = Mapping[str, Fact]


def _v(facts: Facts, name: str):
    fact = facts.get(name)
    return None if fact is None else fact.value


def _floor2(x: float) -> float:
    return math.floor(x * 100 + 1e-9) / 100


def _ceil2(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


@dataclass(frozen=True)
class Budget:
    """vLLM's memory budget on one GPU, as far as the log tells it."""

    total: float | None
    utilization: float | None
    weights: float | None
    kv: float | None                 # available KV memory, GiB
    kv_tokens: int | None
    gib_per_token: float | None      # KV bytes per token / 2**30, derived from the log itself

    @classmethod
    def from_facts(cls, facts: Facts) -> "Budget":
        kv, tokens = _v(facts, "kv_cache_gib"), _v(facts, "kv_cache_tokens")
        per_token = None
        if kv and tokens and kv > 0:
            per_token = kv / tokens
        else:
            needed, length = _v(facts, "kv_needed_gib"), _v(facts, "max_model_len")
            if needed and length:
                per_token = needed / length
        if tokens is None:
            tokens = _v(facts, "estimated_max_model_len")
        if tokens is None and per_token and kv is not None:
            tokens = int(kv / per_token) if kv > 0 else 0
        return cls(_v(facts, "gpu_total_gib"), _v(facts, "gpu_memory_utilization"), _v(facts, "weights_gib"),
                   kv, tokens, per_token)

    def utilization_for_tokens(self, tokens: int) -> float | None:
        """The utilization whose budget leaves KV room for `tokens` (same weights and activations)."""
        if None in (self.total, self.utilization, self.kv, self.gib_per_token) or not self.total:
            return None
        extra = tokens * self.gib_per_token - self.kv
        return self.utilization + (extra + SAFETY_MARGIN_RATIO * self.total / 2) / self.total

    def tokens_at_utilization(self, utilization: float) -> int | None:
        if None in (self.total, self.utilization, self.kv, self.gib_per_token) or not self.gib_per_token:
            return None
        kv = self.kv + (utilization - self.utilization) * self.total
        return max(0, int(kv / self.gib_per_token))


FixSolver = Callable[[Facts], list[Fix]]
FIXES: dict[str, FixSolver] = {}


def solver(name: str) -> Callable[[FixSolver], FixSolver]:
    def register(fn: FixSolver) -> FixSolver:
        FIXES[name] = fn
        return fn
    return register


# --- kv_cache_too_small ----------------------------------------------------------------------------

@solver("max_model_len_that_fits")
def max_model_len_that_fits(facts: Facts) -> list[Fix]:
    """The largest --max-model-len the KV cache holds (vLLM's estimate, else its token count)."""
    estimate = _v(facts, "estimated_max_model_len")
    budget = Budget.from_facts(facts)
    requested = _v(facts, "max_model_len")
    if estimate:
        value, basis, used = estimate, "vLLM's own estimate of the longest length that fits", ("estimated_max_model_len",)
    elif _v(facts, "kv_cache_tokens"):
        value, basis, used = _v(facts, "kv_cache_tokens"), "the tokens the KV cache holds", ("kv_cache_tokens",)
    elif budget.kv_tokens is not None and budget.kv is not None and budget.kv > 0:
        value = budget.kv_tokens // 16 * 16
        basis, used = "available KV memory / KV per token", ("kv_cache_gib", "kv_needed_gib", "max_model_len")
    else:
        if budget.kv is not None and budget.kv <= 0:
            return [Fix(action="No --max-model-len fits: the weights and activations already take the whole budget "
                               f"(available KV memory {budget.kv:.2f} GiB)",
                        why="lowering the length cannot help; free memory for the KV cache first",
                        computed_from=("kv_cache_gib",), reference=DOCS_MEMORY)]
        return [Fix(action="Lower --max-model-len to what the workload needs",
                    why="the log does not give the KV capacity, so the largest length that fits is unknown",
                    flag="--max-model-len", reference=DOCS_MEMORY)]
    if requested and value >= requested:
        return []
    return [Fix(action=f"--max-model-len {value}", flag="--max-model-len", value=int(value),
                why=f"the largest length that fits: {basis}" + (f" (was {requested})" if requested else ""),
                computed_from=used, reference=DOCS_MEMORY, checked=True)]


@solver("utilization_for_max_model_len")
def utilization_for_max_model_len(facts: Facts) -> list[Fix]:
    """The --gpu-memory-utilization whose budget fits the requested --max-model-len."""
    requested = _v(facts, "max_model_len")
    budget = Budget.from_facts(facts)
    if not requested:
        return []
    needed = budget.utilization_for_tokens(requested)
    if needed is None:
        extra = (requested * budget.gib_per_token - budget.kv) if budget.gib_per_token and budget.kv is not None else None
        more = f"the KV cache needs {extra:.2f} GiB more; " if extra and extra > 0 else ""
        return [Fix(action="Raise --gpu-memory-utilization if the GPU has room",
                    why=f"{more}the exact value needs the GPU's total memory, which the log does not print"
                        if "gpu_total_gib" not in facts else f"{more}the exact value needs the KV size per token",
                    flag="--gpu-memory-utilization", computed_from=("kv_needed_gib", "kv_cache_gib"),
                    reference=DOCS_MEMORY)]
    value = _ceil2(needed)
    used = ("max_model_len", "gpu_total_gib", "gpu_memory_utilization", "kv_cache_gib")
    if value > MAX_PRACTICAL_UTILIZATION:
        return [Fix(action=f"Raising --gpu-memory-utilization is not enough: {requested} tokens would need {value:.2f}",
                    why=f"above {MAX_PRACTICAL_UTILIZATION} nothing is left for the CUDA context and other processes; "
                        "shorten the length, quantize the KV cache or add GPUs",
                    computed_from=used, reference=DOCS_MEMORY)]
    return [Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
                why=f"keeps --max-model-len {requested}: the KV cache needs "
                    f"{requested * budget.gib_per_token:.2f} GiB and has {budget.kv:.2f} GiB",
                computed_from=used, reference=DOCS_MEMORY, checked=True)]


@solver("kv_cache_dtype_fp8")
def kv_cache_dtype_fp8(facts: Facts) -> list[Fix]:
    """--kv-cache-dtype fp8: twice the KV tokens in the same memory."""
    dtype = str(_v(facts, "kv_cache_dtype") or "auto")
    if dtype.startswith("fp8"):
        return []
    budget = Budget.from_facts(facts)
    requested = _v(facts, "max_model_len")
    tokens = budget.kv_tokens
    if tokens and requested:
        fits = "fits" if tokens * 2 >= requested else "still does not fit"
        why = f"FP8 halves the KV bytes per token: about {tokens * 2} tokens instead of {tokens}; {requested} {fits}"
    else:
        why = "FP8 halves the KV bytes per token, so the same memory holds twice the tokens (check accuracy)"
    return [Fix(action="--kv-cache-dtype fp8", flag="--kv-cache-dtype", value="fp8", why=why,
                computed_from=("kv_cache_tokens", "max_model_len"), reference=DOCS_FP8_KV)]


@solver("tensor_parallel_for_kv")
def tensor_parallel_for_kv(facts: Facts) -> list[Fix]:
    """Twice the tensor-parallel GPUs: smaller weight and KV slices per GPU."""
    tp = _v(facts, "tensor_parallel_size") or 1
    budget = Budget.from_facts(facts)
    why = "each GPU holds a smaller slice of the weights and of every token's KV, leaving more KV room"
    if budget.weights and budget.kv is not None and budget.gib_per_token:
        tokens = int((budget.kv + budget.weights / 2) / (budget.gib_per_token / 2))
        why = f"about {tokens} KV tokens with twice the GPUs (weights {budget.weights:.2f} GiB per GPU halve)"
    return [Fix(action=f"--tensor-parallel-size {tp * 2}", flag="--tensor-parallel-size", value=tp * 2, why=why,
                computed_from=("tensor_parallel_size", "weights_gib", "kv_cache_gib"), reference=DOCS_MEMORY)]


# --- weights_dont_fit ---------------------------------------------------------------------------------

def _params_from_name(model: str | None) -> float | None:
    """'Qwen2-7B-Instruct' -> 7e9; mixture names like 8x7B multiply."""
    if not model:
        return None
    m = regex.search(r"(?:(\d+)x)?(\d+(?:\.\d+)?)\s?[Bb](?![a-zA-Z])", model.split("/")[-1])
    if not m:
        return None
    return float(m.group(2)) * 1e9 * (int(m.group(1)) if m.group(1) else 1)


def weights_needed(facts: Facts) -> tuple[float | None, str, bool]:
    """Total weight size over all GPUs: (GiB, how it was found, whether it is only a lower bound)."""
    tp = _v(facts, "tensor_parallel_size") or 1
    loaded = _v(facts, "weights_gib")
    if loaded:
        return loaded * tp, f"{loaded:.2f} GiB per GPU x {tp}", False
    params = _params_from_name(_v(facts, "model"))
    quant = _v(facts, "quantization")
    dtype = str(_v(facts, "dtype") or "auto")
    per_param = QUANT_BYTES.get(str(quant)) if quant else DTYPE_BYTES.get(dtype, 2.0)
    if params and per_param:
        gib = params * per_param / 2**30
        return gib, f"{params / 1e9:g}B parameters x {per_param:g} bytes ({quant or dtype}) from the model name", False
    held = _v(facts, "allocated_gib") or _v(facts, "this_process_gib")
    tried = _v(facts, "tried_to_allocate_gib") or 0.0
    if held:
        return (held + tried) * tp, "what the GPU already held when loading failed, plus the failed allocation", True
    return None, "", True


@solver("tensor_parallel_for_weights")
def tensor_parallel_for_weights(facts: Facts) -> list[Fix]:
    """The smallest --tensor-parallel-size whose weight slice leaves room for activations and KV."""
    total, util = _v(facts, "gpu_total_gib"), _v(facts, "gpu_memory_utilization") or 0.9
    weights, how, lower_bound = weights_needed(facts)
    tp_now = _v(facts, "tensor_parallel_size") or 1
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
    return [Fix(action=f"--tensor-parallel-size {tp}", flag="--tensor-parallel-size", value=tp,
                why=f"{qualifier}{weights:.1f} GiB of weights ({how}) over {tp} GPUs is {weights / tp:.1f} GiB each, "
                    f"leaving a quarter of each GPU's {total * util:.1f} GiB budget for activations and the KV cache",
                computed_from=("gpu_total_gib", "gpu_memory_utilization", "weights_gib", "allocated_gib",
                               "tried_to_allocate_gib", "model"),
                reference=DOCS_MEMORY, checked=not lower_bound)]


@solver("smaller_weights")
def smaller_weights(facts: Facts) -> list[Fix]:
    """Smaller weights: 16-bit instead of float32, or FP8 / pre-quantized checkpoints."""
    dtype = str(_v(facts, "dtype") or "")
    fixes = []
    if dtype in ("float32", "float", "torch.float32"):
        fixes.append(Fix(action="--dtype bfloat16", flag="--dtype", value="bfloat16",
                         why="the weights are loaded in float32, twice the size of bfloat16/float16 "
                             "(use --dtype half on GPUs older than Ampere)", computed_from=("dtype",),
                         reference=DOCS_ENGINE_ARGS))
    weights, how, lower_bound = weights_needed(facts)
    size = f" (about {weights / 2:.1f} GiB instead of {weights:.1f} GiB)" if weights and not lower_bound else ""
    if not _v(facts, "quantization"):
        fixes.append(Fix(action="--quantization fp8", flag="--quantization", value="fp8",
                         why=f"FP8 weights take half the memory of 16-bit ones{size}; or serve a pre-quantized "
                             "(AWQ/GPTQ/FP8) checkpoint", computed_from=("weights_gib", "model"), reference=DOCS_MEMORY))
    return fixes


@solver("cpu_offload")
def cpu_offload(facts: Facts) -> list[Fix]:
    """--cpu-offload-gb for the weights that do not fit on the GPU."""
    total, util = _v(facts, "gpu_total_gib"), _v(facts, "gpu_memory_utilization") or 0.9
    weights, how, lower_bound = weights_needed(facts)
    tp = _v(facts, "tensor_parallel_size") or 1
    if not total or not weights:
        return []
    excess = weights / tp - total * util * (1 - MIN_KV_SHARE_FOR_WEIGHTS)
    if excess <= 0:
        return []
    gb = math.ceil(excess)
    return [Fix(action=f"--cpu-offload-gb {gb}", flag="--cpu-offload-gb", value=gb,
                why=f"keeps {'at least ' if lower_bound else ''}{gb} GiB of weights per GPU in CPU memory; "
                    "slow unless the CPU-GPU link is fast", computed_from=("gpu_total_gib", "weights_gib"),
                reference=DOCS_MEMORY)]


# --- external_pressure ---------------------------------------------------------------------------------

@solver("utilization_within_free_memory")
def utilization_within_free_memory(facts: Facts) -> list[Fix]:
    """The largest --gpu-memory-utilization the free memory allows (free / total minus a margin)."""
    total, free, others = _v(facts, "gpu_total_gib"), _v(facts, "free_gib"), _v(facts, "other_processes_gib")
    if not total:
        return [Fix(action="Lower --gpu-memory-utilization below the share of the GPU that is really free",
                    why="the GPU's total memory is not in the log", flag="--gpu-memory-utilization",
                    reference=DOCS_MEMORY)]
    if _v(facts, "failure_kind") == "free_memory_low" and free is not None:
        available, basis = free, f"{free:.2f} of {total:.2f} GiB were free at startup"
    elif others is not None:
        available, basis = total - others, f"other processes hold {others:.2f} of {total:.2f} GiB"
    else:
        return []
    value = _floor2(available / total - SAFETY_MARGIN_RATIO)
    if value <= 0.05:
        return [Fix(action="Free the GPU first: almost nothing is left for vLLM", why=basis,
                    computed_from=("gpu_total_gib", "free_gib", "other_processes_gib"), reference=DOCS_MEMORY)]
    weights = _v(facts, "weights_gib")
    if weights and weights > value * total * 0.9:
        return [Fix(action="Lowering --gpu-memory-utilization cannot help: free the GPU",
                    why=f"{basis}; at {value:.2f} vLLM could use {value * total:.2f} GiB, less than the "
                        f"{weights:.2f} GiB the weights alone take",
                    computed_from=("gpu_total_gib", "other_processes_gib", "weights_gib"), reference=DOCS_MEMORY,
                    checked=True)]
    return [Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
                why=f"{basis}; {value:.2f} x {total:.2f} = {value * total:.2f} GiB fits with a "
                    f"{SAFETY_MARGIN_RATIO:.0%} margin",
                computed_from=("gpu_total_gib", "free_gib", "other_processes_gib"), reference=DOCS_MEMORY,
                checked=True)]


@solver("free_other_processes")
def free_other_processes(facts: Facts) -> list[Fix]:
    """Stop or move the other processes holding GPU memory."""
    others = _v(facts, "other_processes_gib")
    held = f" holding {others:.2f} GiB" if others else ""
    return [Fix(action=f"Stop or move the other process(es){held} on this GPU",
                why="find them with `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`; "
                    "in Kubernetes, check for another pod scheduled on the same GPU",
                computed_from=("other_processes_gib",), reference=DOCS_TROUBLESHOOTING)]


@solver("utilization_headroom")
def utilization_headroom(facts: Facts) -> list[Fix]:
    """A lower --gpu-memory-utilization that leaves the failed allocation outside vLLM's budget."""
    total, util = _v(facts, "gpu_total_gib"), _v(facts, "gpu_memory_utilization")
    tried = _v(facts, "tried_to_allocate_gib")
    if not total or not util or tried is None:
        missing = [n for n in ("gpu_total_gib", "gpu_memory_utilization", "tried_to_allocate_gib") if n not in facts]
        return [Fix(action="Lower --gpu-memory-utilization to leave headroom outside vLLM's budget",
                    why="the exact value needs " + ", ".join(missing), flag="--gpu-memory-utilization",
                    reference=DOCS_MEMORY)]
    value = _floor2(util - (tried + HEADROOM_MARGIN_GIB) / total)
    if value <= 0.1:
        return []
    return [Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
                why=f"leaves the {tried:.2f} GiB that failed (+{HEADROOM_MARGIN_GIB} GiB) outside vLLM's budget: "
                    f"{util:.2f} -> {value:.2f} of {total:.2f} GiB; the KV cache shrinks by {(util - value) * total:.2f} GiB",
                computed_from=("gpu_total_gib", "gpu_memory_utilization", "tried_to_allocate_gib"),
                reference=DOCS_MEMORY, checked=True)]


@solver("enforce_eager")
def enforce_eager(facts: Facts) -> list[Fix]:
    """--enforce-eager: no CUDA graphs, no graph memory."""
    if _v(facts, "enforce_eager") is True:
        return []
    graphs = _v(facts, "cuda_graph_gib") or _v(facts, "private_pool_gib")
    saved = f" (graphs took {graphs:.2f} GiB)" if graphs else ""
    return [Fix(action="--enforce-eager", flag="--enforce-eager", value=True,
                why=f"skips CUDA graph capture and its memory{saved}; costs some decode speed. Or capture fewer "
                    "sizes (compilation_config cudagraph_capture_sizes) or lower --max-num-seqs",
                computed_from=("cuda_graph_gib", "private_pool_gib"), reference=DOCS_MEMORY)]


# --- preemption_slowdown -----------------------------------------------------------------------------------

@solver("max_num_seqs_for_kv")
def max_num_seqs_for_kv(facts: Facts) -> list[Fix]:
    """A --max-num-seqs that keeps the KV cache below full at the observed request sizes."""
    running = _v(facts, "running_at_saturation")
    current = _v(facts, "max_num_seqs")
    if running:
        value = max(1, int(running * 0.9))
        return [Fix(action=f"--max-num-seqs {value}", flag="--max-num-seqs", value=value,
                    why=f"the KV cache filled up with about {running} requests running; {value} keeps it near 90 %"
                        + (f" (now {current})" if current else ""),
                    computed_from=("running_at_saturation", "max_num_seqs"), reference=DOCS_PREEMPTION)]
    return [Fix(action="Lower --max-num-seqs (or --max-num-batched-tokens)",
                why="fewer requests at once need less KV cache; the log has no stats line at saturation to size it",
                flag="--max-num-seqs", reference=DOCS_PREEMPTION)]


@solver("more_kv_for_preemption")
def more_kv_for_preemption(facts: Facts) -> list[Fix]:
    """More KV cache: higher utilization, FP8 KV cache, more tensor-parallel GPUs."""
    util = _v(facts, "gpu_memory_utilization")
    fixes = []
    if util is not None and util < MAX_PRACTICAL_UTILIZATION - 0.01:
        value = min(MAX_PRACTICAL_UTILIZATION, _floor2(util + 0.05))
        budget = Budget.from_facts(facts)
        tokens = budget.tokens_at_utilization(value)
        gain = f": about {tokens} KV tokens instead of {budget.kv_tokens}" if tokens and budget.kv_tokens else ""
        fixes.append(Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
                         why=f"more of the GPU for the KV cache{gain}; only if nothing else uses the GPU",
                         computed_from=("gpu_memory_utilization", "gpu_total_gib", "kv_cache_gib"),
                         reference=DOCS_PREEMPTION))
    fixes.extend(kv_cache_dtype_fp8(facts))
    fixes.extend(tensor_parallel_for_kv(facts))
    return fixes


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
    kind = _v(facts, "failure_kind")
    action, why = _NON_MEMORY_ADVICE.get(kind, ("Read the root error line above", "it is not a GPU memory problem; "
                                                "changing memory flags will not help"))
    return [Fix(action=action, why=why, computed_from=("failure_kind",), reference=DOCS_TROUBLESHOOTING)]
