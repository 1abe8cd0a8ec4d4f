"""Fixes for a KV cache that is too small: at startup (kv_cache_too_small) or under load (preemption_slowdown)."""
from __future__ import annotations

import dataclasses
import math

from ..model import Fix
from .model import GIB
from .predict import NEEDS_CONFIG, NEEDS_GPU, Prediction
from .registry import (
    DOCS_FP8_KV,
    DOCS_MEMORY,
    DOCS_PREEMPTION,
    MAX_PRACTICAL_UTILIZATION,
    NOTHING_GIVEN,
    SAFETY_MARGIN_RATIO,
    TARGET_KV_USAGE,
    Facts,
    Given,
    ceil2,
    floor2,
    geometry,
    outcome,
    value_of,
    verified,
)

NEEDS_SATURATION = "--metrics snapshots (or stats lines) with the KV cache usage while it was full"


def max_model_len_that_fits(facts: Facts, given: Given = NOTHING_GIVEN) -> list[Fix]:
    """The largest --max-model-len the KV cache holds (vLLM's own estimate, else the model's token count)."""
    requested = value_of(facts, "max_model_len")
    g = geometry(facts, given)
    now = outcome(facts, given)
    estimate = value_of(facts, "estimated_max_model_len")
    used: tuple[str, ...]               # the facts the value comes from
    if estimate:
        value, basis = estimate, "vLLM's own estimate of the longest length that fits"
        used = ("estimated_max_model_len",)
    elif value_of(facts, "kv_cache_tokens"):
        value, basis, used = value_of(facts, "kv_cache_tokens"), "the tokens the KV cache holds", ("kv_cache_tokens",)
    elif now.kv_tokens:
        value, basis = now.kv_tokens, "available KV memory / KV bytes per token"
        used = ("kv_cache_gib", "kv_needed_gib", "max_model_len")
    else:
        if g.kv_gib is not None and g.kv_gib.value <= 0:
            return [Fix(action="No --max-model-len fits: the weights and activations already take the whole budget "
                               f"(available KV memory {g.kv_gib.value:.2f} GiB)",
                        why="lowering the length cannot help; free memory for the KV cache first",
                        computed_from=("kv_cache_gib",), reference=DOCS_MEMORY)]
        return [Fix(action="Lower --max-model-len to what the workload needs",
                    why="the log does not give the KV capacity, so the largest length that fits is unknown",
                    flag="--max-model-len", reference=DOCS_MEMORY)]
    if requested and value >= requested:
        return []
    fix = Fix(action=f"--max-model-len {value}", flag="--max-model-len", value=int(value),
              why=f"the largest length that fits: {basis}" + (f" (was {requested})" if requested else ""),
              computed_from=used, reference=DOCS_MEMORY)
    p = outcome(facts, given, max_model_len=int(value))
    return [verified(fix, p, p.starts)]


def utilization_for_max_model_len(facts: Facts, given: Given = NOTHING_GIVEN) -> list[Fix]:
    """The smallest --gpu-memory-utilization whose budget fits the requested --max-model-len (plus 1 % of the GPU)."""
    requested = value_of(facts, "max_model_len")
    if not requested or value_of(facts, "platform") == "cpu":   # the CPU's KV size is set, not a share: cpu_fixes
        return []
    g = geometry(facts, given)
    total = g.total_gib.value if g.total_gib else None
    kv = g.kv_gib.value if g.kv_gib else None
    per_token = g.bytes_per_token.value if g.bytes_per_token else None
    used = ("max_model_len", "gpu_total_gib", "gpu_memory_utilization", "kv_cache_gib")
    if total is None or kv is None:
        more = ""
        if per_token and kv is not None and requested * per_token / GIB > kv:
            more = f"the KV cache needs {requested * per_token / GIB - kv:.2f} GiB more; "
        why = f"{more}the exact value needs the GPU's total memory, which the log does not print" if total is None \
            else f"{more}the exact value needs the available KV memory"
        return [Fix(action="Raise --gpu-memory-utilization if the GPU has room", why=why,
                    flag="--gpu-memory-utilization", computed_from=("kv_needed_gib", "kv_cache_gib"),
                    reference=DOCS_MEMORY,
                    status="unchecked", needs=(NEEDS_GPU,) if total is None else ())]
    block = g.block_size.value
    margin = SAFETY_MARGIN_RATIO * total / 2
    if per_token:
        need = math.ceil(requested / block) * block * per_token / GIB
        goal = f"keeps --max-model-len {requested}: the KV cache needs {need:.2f} GiB and has {kv:.2f} GiB"
    else:
        need = 0.0
        goal = (f"the least that leaves any KV memory ({kv:.2f} GiB now); the KV bytes per token are not in the log, "
                f"so whether {requested} tokens then fit is unknown")
    value = ceil2(g.utilization.value + (need - kv + margin) / total)
    if value > MAX_PRACTICAL_UTILIZATION:
        return [Fix(action=f"Raising --gpu-memory-utilization is not enough: {requested} tokens would need {value:.2f}",
                    why=f"above {MAX_PRACTICAL_UTILIZATION} nothing is left for the CUDA context and other processes; "
                        "shorten the length, quantize the KV cache or add GPUs",
                    computed_from=used, reference=DOCS_MEMORY)]
    fix = Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
              why=f"{goal}; {SAFETY_MARGIN_RATIO / 2:.0%} of the GPU added as margin", computed_from=used,
              reference=DOCS_MEMORY)
    p = outcome(facts, given, gpu_memory_utilization=value)
    if per_token is None or p.starts is None:
        return [verified(fix, p, None, needs=(NEEDS_CONFIG,))]
    return [verified(fix, p, p.starts and not p.risks, p.risks[0] if p.risks else None)]


def kv_cache_dtype_fp8(facts: Facts, given: Given = NOTHING_GIVEN) -> list[Fix]:
    """--kv-cache-dtype fp8: twice the KV tokens in the same memory."""
    if str(value_of(facts, "kv_cache_dtype") or "auto").startswith("fp8"):
        return []
    now = outcome(facts, given)
    p = outcome(facts, given, kv_cache_dtype="fp8")
    requested = value_of(facts, "max_model_len")
    if p.kv_tokens and now.kv_tokens is not None and requested:
        fits = "fits" if p.starts else "still does not fit"
        why = (f"FP8 halves the KV bytes per token: about {p.kv_tokens} tokens instead of "
               f"{now.kv_tokens}; {requested} {fits}")
    else:
        why = "FP8 halves the KV bytes per token, so the same memory holds twice the tokens (check accuracy)"
    fix = Fix(action="--kv-cache-dtype fp8", flag="--kv-cache-dtype", value="fp8", why=why,
              computed_from=("kv_cache_tokens", "kv_cache_gib", "max_model_len"), reference=DOCS_FP8_KV)
    return [verified(fix, p, p.starts)]


def tensor_parallel_sizes(facts: Facts, given: Given, above: int) -> list[int]:
    """The tensor-parallel sizes to try past `above`, smallest first: powers of two that divide the model's
    attention heads (when known) and fit the node's GPUs (--gpus)."""
    heads = geometry(facts, given).limits.attention_heads
    pp = value_of(facts, "pipeline_parallel_size") or 1
    return [n for n in (2, 4, 8, 16) if n > above and (heads is None or not heads.value % n)
            and (given.gpus is None or n * pp <= given.gpus)]


def tensor_parallel_for_kv(facts: Facts, given: Given = NOTHING_GIVEN) -> list[Fix]:
    """The next tensor-parallel size: smaller weight and KV slices per GPU."""
    tp = value_of(facts, "tensor_parallel_size") or 1
    sizes = tensor_parallel_sizes(facts, given, tp)
    if not sizes:
        return []
    size = sizes[0]
    now, p = outcome(facts, given), outcome(facts, given, tensor_parallel_size=size)
    why = "each GPU holds a smaller slice of the weights and of every token's KV, leaving more KV room"
    if p.kv_tokens is not None and p.weights_gib is not None and now.weights_gib is not None:
        gpus, share = ("twice the GPUs", "half") if size == 2 * tp else (f"{size} GPUs", f"{tp}/{size}")
        why = (f"about {p.kv_tokens} KV tokens per GPU with {gpus}: each holds {p.weights_gib:.2f} GiB of "
               f"weights instead of {now.weights_gib:.2f} and {share} of every token's KV")
    if geometry(facts, given).limits.attention_heads is None:
        why += "; vLLM needs the size to divide the model's attention heads, which vtriage does not know for it"
    fix = Fix(action=f"--tensor-parallel-size {size}", flag="--tensor-parallel-size", value=size, why=why,
              computed_from=("tensor_parallel_size", "weights_gib", "kv_cache_gib"), reference=DOCS_MEMORY)
    if geometry(facts, given).limits.attention_heads is None and p.starts is not False:
        return [verified(fix, p, None, needs=(NEEDS_CONFIG,))]
    return [verified(fix, p, p.starts if p.kv_tokens is not None or p.starts is False else None)]


# --- preemption_slowdown -------------------------------------------------------------------------------

def _max_num_seqs(facts: Facts, given: Given) -> tuple[int, str]:
    """The requests the scheduler may run at once: the incident's --max-num-seqs, else vLLM's default."""
    logged = value_of(facts, "max_num_seqs")
    if logged:
        return logged, f"--max-num-seqs {logged}"
    g = geometry(facts, given)
    total = g.total_gib.value if g.total_gib else None
    default = 1024 if g.engine == "v1" and total and total >= 70 else 256
    return default, f"vLLM's default --max-num-seqs {default}"


def _request_tokens(facts: Facts, given: Given) -> float | None:
    """KV tokens a running request held when the cache filled up: usage x cache tokens / requests running."""
    running, usage = value_of(facts, "running_at_saturation"), value_of(facts, "kv_cache_usage_max")
    tokens = outcome(facts, given).kv_tokens
    return usage * tokens / running if running and usage and tokens else None


def _stops_preempting(facts: Facts, given: Given, p: Prediction,
                      seqs: int | None = None) -> tuple[bool | None, str | None]:
    """Whether max_num_seqs requests of the size seen at saturation fit in the predicted KV cache."""
    per_request = _request_tokens(facts, given)
    if per_request is None or p.kv_tokens is None:
        return None, None
    limit, said = (seqs, f"--max-num-seqs {seqs}") if seqs else _max_num_seqs(facts, given)
    need = limit * per_request
    if need <= p.kv_tokens:
        return True, None
    held = max(1, math.floor(TARGET_KV_USAGE * p.kv_tokens / per_request))
    return False, (f"still preempts: with {said}, {limit} requests of ~{per_request:,.0f} tokens need "
                   f"{need:,.0f} KV tokens and the cache would hold {p.kv_tokens:,}; "
                   f"combine with --max-num-seqs {held}")


def max_num_seqs_for_kv(facts: Facts, given: Given = NOTHING_GIVEN) -> list[Fix]:
    """A --max-num-seqs that keeps the KV cache near 90 % at the request sizes seen when it filled up."""
    running, current = value_of(facts, "running_at_saturation"), value_of(facts, "max_num_seqs")
    if not running:
        return [Fix(action="Lower --max-num-seqs (or --max-num-batched-tokens)",
                    why="fewer requests at once need less KV cache; the log has no stats line at saturation to size it",
                    flag="--max-num-seqs", reference=DOCS_PREEMPTION)]
    tokens = outcome(facts, given).kv_tokens
    per_request = _request_tokens(facts, given)
    value = max(1, int(TARGET_KV_USAGE * tokens / per_request) if per_request and tokens
                else int(running * TARGET_KV_USAGE))
    fix = Fix(action=f"--max-num-seqs {value}", flag="--max-num-seqs", value=value,
              why=f"the KV cache filled up with about {running} requests running; {value} keeps it near "
                  f"{TARGET_KV_USAGE:.0%}" + (f" (now {current})" if current else ""),
              computed_from=("running_at_saturation", "kv_cache_usage_max", "kv_cache_tokens", "max_num_seqs"),
              reference=DOCS_PREEMPTION)
    if per_request is None or not tokens:
        missing = NEEDS_SATURATION if not value_of(facts, "kv_cache_usage_max") else NEEDS_CONFIG
        return [dataclasses.replace(fix, status="unchecked", needs=(missing,))]
    predicted_usage = value * per_request / tokens
    summary = (f"about {predicted_usage:.0%} KV usage with {value} requests of ~{per_request:,.0f} tokens "
               f"({tokens:,}-token cache)")
    ok = value * per_request <= tokens
    return [dataclasses.replace(fix, checked=ok, status="checked" if ok else "not_enough", predicted={
        "summary": summary, "max_num_seqs": value, "kv_cache_tokens": tokens,
        "tokens_per_request": round(per_request), "kv_cache_usage": round(predicted_usage, 2)})]


def _for_preemption(fix: Fix, facts: Facts, given: Given, p: Prediction, grows: bool) -> Fix:
    """A fix that gives the KV cache more room, checked against the goal: the requests the scheduler admits fit."""
    if not grows and p.starts is not False:
        return verified(fix, p, None if p.kv_tokens is None else False, "the KV cache does not grow")
    if p.starts is not True:
        return verified(fix, p, p.starts)
    ok, short = _stops_preempting(facts, given, p)
    return verified(fix, p, ok, short, needs=(NEEDS_SATURATION,))


def more_kv_for_preemption(facts: Facts, given: Given = NOTHING_GIVEN) -> list[Fix]:
    """More KV cache: higher utilization, FP8 KV cache, more tensor-parallel GPUs; each checked against the
    requests --max-num-seqs lets in at the size they had when the cache filled up."""
    util = value_of(facts, "gpu_memory_utilization")
    now = outcome(facts, given)
    fixes = []
    on_gpu = value_of(facts, "platform") != "cpu"      # the CPU's KV size is set, not a share: cpu_fixes
    if on_gpu and util is not None and util < MAX_PRACTICAL_UTILIZATION - 0.01:
        value = min(MAX_PRACTICAL_UTILIZATION, floor2(util + 0.05))
        p = outcome(facts, given, gpu_memory_utilization=value)
        gain = f": about {p.kv_tokens} KV tokens instead of {now.kv_tokens}" if p.kv_tokens and now.kv_tokens else ""
        fix = Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
                  why=f"more of the GPU for the KV cache{gain}; only if nothing else uses the GPU",
                  computed_from=("gpu_memory_utilization", "gpu_total_gib", "kv_cache_gib"), reference=DOCS_PREEMPTION)
        grows = p.kv_tokens is not None and now.kv_tokens is not None and p.kv_tokens > now.kv_tokens
        if p.risks and p.starts:
            fixes.append(verified(fix, p, False, p.risks[0]))
        else:
            fixes.append(_for_preemption(fix, facts, given, p, grows or p.kv_tokens is None))
    for fix in (*kv_cache_dtype_fp8(facts, given), *tensor_parallel_for_kv(facts, given)):
        if fix.status in ("checked",):
            changes = {"kv_cache_dtype": "fp8"} if fix.flag == "--kv-cache-dtype" \
                else {"tensor_parallel_size": fix.value}
            fix = _for_preemption(fix, facts, given, outcome(facts, given, **changes), True)
        fixes.append(fix)
    return fixes


V0_DEFAULT_SWAP_SPACE_GIB = 4          # --swap-space's default: CPU memory per GPU for swapped-out KV blocks


def more_swap_space(facts: Facts, given: Given = NOTHING_GIVEN) -> list[Fix]:
    """--swap-space: twice what the server had (vLLM's default is 4 GiB per GPU), so V0's swapped-out requests find
    CPU blocks instead of aborting the engine."""
    now = value_of(facts, "swap_space_gib")
    had = now if now else V0_DEFAULT_SWAP_SPACE_GIB
    value = int(math.ceil(2 * had))
    was = f"{now:g} GiB" if now else f"vLLM's default {V0_DEFAULT_SWAP_SPACE_GIB} GiB"
    return [Fix(action=f"--swap-space {value}", flag="--swap-space", value=value,
                why=f"twice the CPU memory per GPU for swapped-out requests' KV blocks (was {was}); the host needs "
                    "that much free RAM for each GPU. Requests with n > 1 or beam search are the ones swapped",
                computed_from=("swap_space_gib",), reference=DOCS_PREEMPTION)]
