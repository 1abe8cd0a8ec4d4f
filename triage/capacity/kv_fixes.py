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
    NO_USER_FIGURES,
    SAFETY_MARGIN_RATIO,
    TARGET_KV_USAGE,
    Facts,
    UserFigures,
    ceil2,
    floor2,
    geometry,
    outcome,
    value_of,
    verified,
)


def max_model_len_that_fits(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
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
            return [Fix(action="Lowering --max-model-len",
                        why="no length fits, since the weights and activations already take the whole budget "
                            f"(available KV memory {g.kv_gib.value:.2f} GiB); free memory for the KV cache first",
                        computed_from=("kv_cache_gib",), reference=DOCS_MEMORY, status="not_enough")]
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


def utilization_for_max_model_len(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """The smallest --gpu-memory-utilization whose budget fits the requested --max-model-len (plus 1 % of the GPU)."""
    requested = value_of(facts, "max_model_len")
    if value_of(facts, "platform") == "cpu":       # the CPU's KV size is set, not a share: cpu_fixes
        return []
    g = geometry(facts, given)
    total = g.total_gib.value if g.total_gib else None
    kv = g.kv_gib.value if g.kv_gib else None
    per_token = g.bytes_per_token.value if g.bytes_per_token else None
    used = ("max_model_len", "gpu_total_gib", "gpu_memory_utilization", "kv_cache_gib")
    if total is None or kv is None or (not requested and kv > 0):
        more = ""
        if requested and per_token and kv is not None and requested * per_token / GIB > kv:
            more = f"the KV cache needs {requested * per_token / GIB - kv:.2f} GiB more; "
        elif kv is not None and kv <= 0:
            more = f"the budget is {-kv:.2f} GiB short of any KV cache; "
        if total is None:
            why = f"{more}the exact value needs the GPU's total memory, which the log does not print"
        elif kv is None:
            why = f"{more}the exact value needs the available KV memory, which the log does not print"
        else:
            why = "how far depends on max_model_len, which the log does not print"
        return [Fix(action="Raise --gpu-memory-utilization if the GPU has room", why=f"vLLM's own remedy; {why}",
                    flag="--gpu-memory-utilization", computed_from=("kv_needed_gib", "kv_cache_gib"),
                    reference=DOCS_MEMORY,
                    status="unchecked", needs=(NEEDS_GPU,) if total is None else ())]
    block = g.block_size.value
    margin = SAFETY_MARGIN_RATIO * total / 2
    if not requested:
        need = 0.0
        goal = (f"the least that leaves any KV memory ({kv:.2f} GiB now); max_model_len is not in the log, so "
                "whether a request of that length then fits is unknown")
    elif per_token:
        need = math.ceil(requested / block) * block * per_token / GIB
        goal = f"keeps --max-model-len {requested}: the KV cache needs {need:.2f} GiB and has {kv:.2f} GiB"
    else:
        need = 0.0
        goal = (f"the least that leaves any KV memory ({kv:.2f} GiB now); the KV bytes per token are not in the log, "
                f"so whether {requested} tokens then fit is unknown")
    value = ceil2(g.utilization.value + (need - kv + margin) / total)
    if value > MAX_PRACTICAL_UTILIZATION:
        goal_said = f"{requested} tokens" if requested else "any KV memory"
        return [Fix(action="Raising --gpu-memory-utilization",
                    why=f"{goal_said} would need {value:.2f}, and above {MAX_PRACTICAL_UTILIZATION} nothing is left "
                        "for the CUDA context and other processes; shorten the length, quantize the KV cache or "
                        "add GPUs",
                    computed_from=used, reference=DOCS_MEMORY, status="not_enough")]
    fix = Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
              why=f"{goal}; {SAFETY_MARGIN_RATIO / 2:.0%} of the GPU added as margin", computed_from=used,
              reference=DOCS_MEMORY)
    p = outcome(facts, given, gpu_memory_utilization=value)
    if per_token is None or p.starts is None:
        return [verified(fix, p, None, needs=(NEEDS_CONFIG,))]
    return [verified(fix, p, p.starts and not p.risks, p.risks[0] if p.risks else None)]


def kv_cache_dtype_fp8(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """--kv-cache-dtype fp8: twice the KV tokens in the same memory."""
    if str(value_of(facts, "kv_cache_dtype") or "auto").startswith("fp8"):
        return []
    now = outcome(facts, given)
    p = outcome(facts, given, kv_cache_dtype="fp8")
    requested = value_of(facts, "max_model_len")
    if p.kv_tokens and now.kv_tokens is not None and requested:
        fits = "fits" if p.starts else "still does not fit"
        why = (f"FP8 halves the KV bytes per token: about {p.kv_tokens:,} tokens instead of "
               f"{now.kv_tokens:,}; {requested:,} {fits}")
    else:
        why = "FP8 halves the KV bytes per token, so the same memory holds twice the tokens (check accuracy)"
    fix = Fix(action="--kv-cache-dtype fp8", flag="--kv-cache-dtype", value="fp8", why=why,
              computed_from=("kv_cache_tokens", "kv_cache_gib", "max_model_len"), reference=DOCS_FP8_KV)
    return [verified(fix, p, p.starts)]


def tensor_parallel_sizes(facts: Facts, given: UserFigures, above: int) -> list[int]:
    """The tensor-parallel sizes to try past `above`, smallest first: powers of two that divide the model's
    attention heads (when known) and fit the node's GPUs (--gpus)."""
    heads = geometry(facts, given).limits.attention_heads
    pp = value_of(facts, "pipeline_parallel_size") or 1
    return [n for n in (2, 4, 8, 16) if n > above and (heads is None or not heads.value % n)
            and (given.gpus is None or n * pp <= given.gpus)]


def tensor_parallel_for_kv(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
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
        why = (f"about {p.kv_tokens:,} KV tokens per GPU with {gpus}: each holds {p.weights_gib:.2f} GiB of "
               f"weights instead of {now.weights_gib:.2f} and {share} of every token's KV")
    if geometry(facts, given).limits.attention_heads is None:
        why += "; vLLM needs the size to divide the model's attention heads, which vtriage does not know for it"
    fix = Fix(action=f"--tensor-parallel-size {size}", flag="--tensor-parallel-size", value=size, why=why,
              computed_from=("tensor_parallel_size", "weights_gib", "kv_cache_gib"), reference=DOCS_MEMORY)
    if geometry(facts, given).limits.attention_heads is None and p.starts is not False:
        return [verified(fix, p, None, needs=(NEEDS_CONFIG,))]
    return [verified(fix, p, p.starts if p.kv_tokens is not None or p.starts is False else None)]


# --- preemption_slowdown -------------------------------------------------------------------------------

def _max_num_seqs(facts: Facts, given: UserFigures) -> tuple[int, str]:
    """The requests the scheduler may run at once: the incident's --max-num-seqs, else vLLM's default."""
    logged = value_of(facts, "max_num_seqs")
    if logged:
        return logged, f"--max-num-seqs {logged}"
    g = geometry(facts, given)
    total = g.total_gib.value if g.total_gib else None
    default = 1024 if g.engine == "v1" and total and total >= 70 else 256
    return default, f"vLLM's default --max-num-seqs {default}"


def _demand(facts: Facts, given: UserFigures) -> tuple[int, str]:
    """The most requests that wanted to run at once: the most running plus the most waiting the input shows, up to
    what --max-num-seqs lets in; the limit itself where the input shows no counts."""
    limit, said = _max_num_seqs(facts, given)
    running, waiting = value_of(facts, "running_max"), value_of(facts, "waiting_max")
    if not running:
        return limit, said
    wanted = running + (waiting or 0)
    if wanted >= limit:
        return limit, said
    return wanted, f"up to {running} running and {waiting or 0} waiting"


def typical_request_tokens(facts: Facts, given: UserFigures) -> tuple[float | None, str]:
    """KV tokens a typical request takes, and where that comes from: the median prompt plus the median output of
    finished requests (/metrics histograms), else the KV tokens each running request held when the cache filled
    (stats lines: usage x cache tokens / requests running)."""
    prompt, output = value_of(facts, "prompt_tokens_p50"), value_of(facts, "generation_tokens_p50")
    if prompt and output is not None:
        return prompt + output, f"the median request of /metrics: {prompt:,.0f} prompt + {output:,.0f} output tokens"
    running, usage = value_of(facts, "running_at_saturation"), value_of(facts, "kv_cache_usage_max")
    tokens = outcome(facts, given).kv_tokens
    if running and usage and tokens:
        return usage * tokens / running, f"what each of the {running} requests running held when the cache filled"
    return None, ""


def _stops_preempting(facts: Facts, given: UserFigures, p: Prediction,
                      seqs: int | None = None) -> tuple[bool | None, str | None]:
    """Whether max_num_seqs requests of the typical size fit in the predicted KV cache."""
    per_request, _ = typical_request_tokens(facts, given)
    if per_request is None or p.kv_tokens is None:
        return None, None
    limit, said = (seqs, f"--max-num-seqs {seqs}") if seqs else _demand(facts, given)
    need = limit * per_request
    if need <= p.kv_tokens:
        return True, None
    held = max(1, math.floor(TARGET_KV_USAGE * p.kv_tokens / per_request))
    return False, (f"still preempts: with {said}, {limit} requests of ~{per_request:,.0f} tokens need "
                   f"{need:,.0f} KV tokens and the cache would hold {p.kv_tokens:,}; "
                   f"combine with --max-num-seqs {held}")


def max_num_seqs_for_kv(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """Fewer requests at once: KV tokens x 90 % / the typical request's tokens, never below the most that ran
    while the cache stayed below the saturation line. It trades throughput for no preemption; a cap at or above
    what the scheduler already lets in, or above what ran when the cache filled, holds nothing back."""
    limit, said = _max_num_seqs(facts, given)
    running = value_of(facts, "running_at_saturation")
    calm = value_of(facts, "running_below_saturation")
    tokens = outcome(facts, given).kv_tokens
    per_request, basis = typical_request_tokens(facts, given)
    used = ("kv_cache_tokens", "running_at_saturation", "kv_cache_usage_max", "prompt_tokens_p50",
            "generation_tokens_p50", "running_below_saturation", "running_max", "max_num_seqs")
    sized = per_request is not None and bool(tokens)
    if not sized and not running:
        return [Fix(action="Lower --max-num-seqs (or --max-num-batched-tokens)",
                    why="fewer requests at once need less KV cache; the input has no request sizes or KV cache "
                        "size to size it by, and it costs throughput",
                    flag="--max-num-seqs", reference=DOCS_PREEMPTION)]
    if per_request is not None and tokens:
        fits = max(1, int(TARGET_KV_USAGE * tokens / per_request))
        held = f"the cache holds about {fits} requests of ~{per_request:,.0f} tokens ({basis})"
    else:
        fits = max(1, int(running * TARGET_KV_USAGE))
        held = f"the KV cache filled up with about {running} requests running"
    value = max(fits, calm or 0)
    if calm and calm > fits:
        held = f"{calm} requests ran without filling the cache"
    if value >= limit or (running and value >= running):
        where = f"{said} lets in no more than that" if value >= limit \
            else f"the cache filled with {running} running, so a cap of {value} would not have held it back"
        return [Fix(action="Lowering --max-num-seqs", flag="--max-num-seqs", status="not_enough",
                    why=f"{held}, and {where}: longer requests than usual fill it; more KV cache is the lever",
                    computed_from=used, reference=DOCS_PREEMPTION)]
    cost = _cost(value, value_of(facts, "running_max"))
    if per_request is None or not tokens:
        return [Fix(action=f"--max-num-seqs {value}", flag="--max-num-seqs", value=value,
                    why=f"{held}; {value} keeps fewer in flight (now {said}); {cost}", computed_from=used,
                    reference=DOCS_PREEMPTION, status="unchecked", needs=(NEEDS_CONFIG,))]
    floor = f", not below the {calm} that ran without filling it" if calm and calm > fits else ""
    fix = Fix(action=f"--max-num-seqs {value}", flag="--max-num-seqs", value=value,
              why=f"{value} requests of ~{per_request:,.0f} tokens ({basis}) keep the {tokens:,}-token cache near "
                  f"{TARGET_KV_USAGE:.0%}{floor} (now {said}); {cost}",
              computed_from=used, reference=DOCS_PREEMPTION)
    predicted_usage = value * per_request / tokens
    summary = (f"about {predicted_usage:.0%} KV usage with {value} requests of ~{per_request:,.0f} tokens "
               f"({tokens:,}-token cache)")
    ok = value * per_request <= tokens
    return [dataclasses.replace(fix, checked=ok, status="checked" if ok else "not_enough", predicted={
        "summary": summary, "max_num_seqs": value, "kv_cache_tokens": tokens,
        "tokens_per_request": round(per_request), "kv_cache_usage": round(predicted_usage, 2)})]


def _cost(value: int, peak: int | None) -> str:
    """What capping the batch at `value` costs, against the most requests the input shows running at once."""
    if peak and value < peak:
        return (f"it costs throughput: {value} requests decode at once where up to {peak} did ({value / peak:.0%} "
                "of that batch), in exchange for no preempted request recomputed or swapped")
    if peak:
        return f"no fewer than the {peak} the input shows running at once, so little throughput is lost"
    return "fewer requests decode at once, so throughput under full load falls with it"


def _for_preemption(fix: Fix, facts: Facts, given: UserFigures, p: Prediction, grows: bool) -> Fix:
    """A fix that gives the KV cache more room: checked when the server starts with a larger cache, and its
    prediction says whether the requests that wanted to run then fit, or what to combine it with."""
    if not grows and p.starts is not False:
        return verified(fix, p, None if p.kv_tokens is None else False, "the KV cache does not grow")
    if p.starts is not True or p.kv_tokens is None:
        return verified(fix, p, p.starts)
    checked = verified(fix, p, True)
    _, short = _stops_preempting(facts, given, p)
    if short is None or checked.predicted is None:
        return checked
    return dataclasses.replace(checked, predicted={**checked.predicted,
                                                   "summary": f"{checked.predicted['summary']}; {short}"})


def more_kv_for_preemption(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """More KV cache on the same GPUs, vLLM's first remedy for preemption: a higher utilization, an FP8 KV cache;
    each checked against the requests that wanted to run, at their typical size."""
    util = geometry(facts, given).utilization
    now = outcome(facts, given)
    fixes = []
    on_gpu = value_of(facts, "platform") != "cpu"      # the CPU's KV size is set, not a share: cpu_fixes
    if on_gpu and util.value < MAX_PRACTICAL_UTILIZATION - 0.01:
        value = min(MAX_PRACTICAL_UTILIZATION, floor2(util.value + 0.05))
        p = outcome(facts, given, gpu_memory_utilization=value)
        gain = ""
        if p.kv_tokens and now.kv_tokens:
            gain = f": about {p.kv_tokens:,} KV tokens instead of {now.kv_tokens:,}"
        was = "" if value_of(facts, "gpu_memory_utilization") else f" (from vLLM's default {util.value:g})"
        fix = Fix(action=f"--gpu-memory-utilization {value:.2f}", flag="--gpu-memory-utilization", value=value,
                  why=f"more of the GPU for the KV cache{was}{gain}; only if nothing else uses the GPU",
                  computed_from=("gpu_memory_utilization", "gpu_total_gib", "kv_cache_gib"), reference=DOCS_PREEMPTION)
        grows = p.kv_tokens is not None and now.kv_tokens is not None and p.kv_tokens > now.kv_tokens
        if p.risks and p.starts:
            fixes.append(verified(fix, p, False, p.risks[0]))
        else:
            fixes.append(_for_preemption(fix, facts, given, p, grows or p.kv_tokens is None))
    for fix in kv_cache_dtype_fp8(facts, given):
        if fix.status == "checked":
            fix = _for_preemption(fix, facts, given, outcome(facts, given, kv_cache_dtype="fp8"), True)
        fixes.append(fix)
    return fixes


def more_gpus_for_preemption(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """More GPUs, vLLM's last remedy for preemption: tensor parallelism, or pipeline parallelism where no
    tensor-parallel size divides the model's heads or fits the node; checked as more_kv_for_preemption's are."""
    fixes = []
    for fix in tensor_parallel_for_kv(facts, given) or pipeline_parallel_for_kv(facts, given):
        if fix.status == "checked":
            setting = "tensor_parallel_size" if fix.flag == "--tensor-parallel-size" else "pipeline_parallel_size"
            fix = _for_preemption(fix, facts, given, outcome(facts, given, **{setting: fix.value}), True)
        fixes.append(fix)
    return fixes


def pipeline_parallel_for_kv(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
    """Twice the pipeline stages: each GPU holds half the layers, their weights and their share of every token's
    KV; the stages take turns, so it adds latency where tensor parallelism would not."""
    tp = value_of(facts, "tensor_parallel_size") or 1
    size = 2 * (value_of(facts, "pipeline_parallel_size") or 1)
    if given.gpus is not None and tp * size > given.gpus:
        return []
    now, p = outcome(facts, given), outcome(facts, given, pipeline_parallel_size=size)
    why = "each GPU holds half the layers and their KV, leaving more KV room; the stages add some latency"
    if p.kv_tokens is not None and now.kv_tokens is not None:
        why = f"about {p.kv_tokens:,} KV tokens per GPU instead of {now.kv_tokens:,}: {why}"
    fix = Fix(action=f"--pipeline-parallel-size {size}", flag="--pipeline-parallel-size", value=size, why=why,
              computed_from=("pipeline_parallel_size", "weights_gib", "kv_cache_gib"), reference=DOCS_PREEMPTION)
    return [verified(fix, p, p.starts if p.kv_tokens is not None or p.starts is False else None)]


V0_DEFAULT_SWAP_SPACE_GIB = 4          # --swap-space's default: CPU memory per GPU for swapped-out KV blocks


def more_swap_space(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> list[Fix]:
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
