"""What vLLM would do with other flags: the calibrated geometry moved by what a change moves.

KV' = KV + (utilization' - utilization) x total + (weights - weights') [+ graph estimate freed by --enforce-eager
on 0.20+], then blocks, tokens and concurrency as the engine computes them. Everything a change rests on
that the log did not measure is named in `assumptions`; what cannot be predicted is named in `unknown`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .model import (
    ASSUMPTION_CONSTANT,
    ASSUMPTION_FP8_KV,
    ASSUMPTION_QUANT,
    ASSUMPTION_TP,
    GIB,
    LOAD_RESERVE_GIB,
    Geometry,
    Settings,
    _quantization,
    dtype_bytes,
    kv_value_bytes,
    weight_bytes,
)

# The `vtriage FILE` options that give what a prediction lacked.
NEEDS_GPU = "--gpu NAME or --gpu-memory-gib GIB"
NEEDS_CONFIG = "--model-config CONFIG"


@dataclass(frozen=True)
class Prediction:
    """One GPU's budget under `settings`; None where the inputs cannot tell."""

    settings: Settings
    total_gib: float | None
    budget_gib: float | None
    weights_gib: float | None
    kv_gib: float | None
    kv_tokens: int | None
    blocks: int | None
    bytes_per_token: float | None
    request_tokens: float | None         # KV one max_model_len request takes, in tokens of every layer
    max_concurrency: float | None        # max_model_len requests held at once
    starts: bool | None
    problem: str | None                  # weights_dont_fit | kv_cache_too_small | refused | None
    reason: str
    outside_budget_gib: float | None     # (1 - utilization) x total: the CUDA context, graphs before 0.20, others
    risks: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()          # the inputs that would make the unknown known (options of `vtriage FILE`)

    def summary(self) -> str:
        if self.starts is False:
            return f"does not start: {self.reason}"
        parts = []
        if self.kv_gib is not None:
            parts.append(f"KV {self.kv_gib:.2f} GiB")
        if self.kv_tokens is not None:
            parts.append(f"{self.kv_tokens:,} tokens")
        if self.max_concurrency is not None and self.settings.max_model_len:
            parts.append(f"{self.max_concurrency:.2f}x at {self.settings.max_model_len:,}")
        reasons = [u for u in self.unknown if not u.startswith("the log prints neither")]
        if not parts and reasons:
            return "unknown: " + reasons[0]
        if self.weights_gib is not None and not parts:
            parts.append(f"weights {self.weights_gib:.2f} GiB per GPU")
            if self.budget_gib is not None:
                parts.append(f"{self.budget_gib - self.weights_gib:.2f} GiB of the {self.budget_gib:.2f} GiB budget "
                             "left for activations and the KV cache")
        return ", ".join(parts) if parts else "unknown: " + "; ".join(self.unknown)

    def as_dict(self) -> dict[str, Any]:
        def r(x: float | None, digits: int = 2) -> float | None:
            return None if x is None else round(x, digits)
        return {"summary": self.summary(), "starts": self.starts, "problem": self.problem, "reason": self.reason,
                "gpu_memory_utilization": self.settings.gpu_memory_utilization,
                "max_model_len": self.settings.max_model_len, "weights_gib": r(self.weights_gib),
                "budget_gib": r(self.budget_gib), "kv_cache_gib": r(self.kv_gib), "kv_cache_tokens": self.kv_tokens,
                "max_concurrency": r(self.max_concurrency), "outside_budget_gib": r(self.outside_budget_gib),
                "risks": list(self.risks), "assumptions": list(self.assumptions), "unknown": list(self.unknown)}


def predict(g: Geometry, s: Settings | None = None) -> Prediction:
    """The budget under `s` (default: the incident's own settings)."""
    s = s or g.settings
    s0 = g.settings
    assumptions: list[str] = []
    unknown: list[str] = []
    needs: list[str] = []
    total = g.total_gib.value if g.total_gib else None
    util0 = g.utilization.value
    util = s.gpu_memory_utilization if s.gpu_memory_utilization is not None else util0
    weights0 = g.weights_gib.value if g.weights_gib else None
    weights, w_ratio = _weights(g, s, assumptions, unknown)
    if w_ratio != w_ratio:                                   # NaN: the weights under that quantization are unknown
        needs.append(NEEDS_CONFIG)
    per_token = _bytes_per_token(g, s, assumptions)
    changed = (util != util0, w_ratio != 1.0, g.graph_in_budget and s.enforce_eager != s0.enforce_eager)
    kv = None
    if g.kv_gib is not None:
        kv = g.kv_gib.value
        if util != util0:
            if total is None:
                kv = None
                unknown.append("the GPU's total memory is not in the log (give --gpu NAME or --gpu-memory-gib): "
                               "a utilization change cannot be sized")
                needs.append(NEEDS_GPU)
            else:
                kv += (util - util0) * total
        if kv is not None and w_ratio != 1.0:
            kv = None if weights is None or weights0 is None else kv + weights0 - weights
        if kv is not None and g.graph_in_budget and s.enforce_eager != s0.enforce_eager and g.cuda_graph_gib:
            kv += g.cuda_graph_gib.value if s.enforce_eager else -g.cuda_graph_gib.value
        if any(changed):
            assumptions.append(ASSUMPTION_CONSTANT)
    elif g.kv_tokens is None:
        unknown.append("the log prints neither the KV cache memory nor its tokens")
    blocks = tokens = None
    block = g.block_size.value
    logged = g.bytes_per_token.value if g.bytes_per_token is not None else None   # per_token is None without it
    same_width = _width_ratio(s0, s) == 1.0 if per_token is None else per_token == logged
    if g.kv_tokens is not None and not any(changed) and same_width:
        tokens = g.kv_tokens.value                   # nothing that sizes the cache changed: vLLM's own count
        blocks = tokens // block
    elif kv is not None and per_token:
        blocks = blocks_for(kv, per_token, block)
        tokens = blocks * block
    elif g.kv_tokens is not None and not any(changed):     # same memory, other width: tokens scale inversely
        blocks = int(g.kv_tokens.value * _width_ratio(s0, s) // block)
        tokens = blocks * block
    elif (kv is not None or g.kv_tokens is not None) and NEEDS_GPU not in needs:
        unknown.append("KV bytes per token are not known (give --model-config)")
        needs.append(NEEDS_CONFIG)
    length = s.max_model_len
    request = _request_tokens(g, s, length)
    concurrency = g.concurrency(blocks, tokens, length, request if request != length else None) if length else None
    problem, reason = _starts(g, weights, kv, blocks, request, length, total)
    refusal = refused(g, s)
    if refusal is not None:
        problem, reason = "refused", refusal
    outside = (1 - util) * total if total else None
    return Prediction(settings=s.replace(gpu_memory_utilization=util), total_gib=total,
                      budget_gib=util * total if total else None, weights_gib=weights, kv_gib=kv, kv_tokens=tokens,
                      blocks=blocks, bytes_per_token=per_token, request_tokens=request, max_concurrency=concurrency,
                      starts=None if problem == "unknown" else problem is None,
                      problem=None if problem == "unknown" else problem, reason=reason, outside_budget_gib=outside,
                      risks=tuple(_risks(g, s, util, total, length)), assumptions=tuple(dict.fromkeys(assumptions)),
                      unknown=tuple(dict.fromkeys(unknown)), needs=tuple(dict.fromkeys(needs)))


def requests_held(g: Geometry, p: Prediction, tokens_per_request: float) -> float | None:
    """How many requests of `tokens_per_request` (prompt + output) the KV cache holds at once; a sliding-window
    layer holds only its window of each."""
    if p.blocks is None or not tokens_per_request:
        return None
    size = _request_tokens(g, p.settings, math.ceil(tokens_per_request))
    return p.blocks / math.ceil(size / g.block_size.value)


def blocks_for(kv_gib: float, bytes_per_token: float, block_size: int) -> int:
    """floor(KV bytes / block bytes), as vLLM counts them (a hair of slack for figures printed to 0.01 GiB)."""
    return max(0, math.floor(kv_gib * GIB / (block_size * bytes_per_token) * (1 + 1e-9)))


def _weights(g: Geometry, s: Settings, assumptions: list[str], unknown: list[str]) -> tuple[float | None, float]:
    """Weights per GPU under `s`, and their ratio to the incident's."""
    s0 = g.settings
    ratio = (s0.tensor_parallel_size * s0.pipeline_parallel_size) / (s.tensor_parallel_size * s.pipeline_parallel_size)
    quant_changed = (s.quantization, s.dtype) != (s0.quantization, s0.dtype)
    spec = g.spec
    if spec is not None:
        def size(x: Settings) -> float:
            return spec.weights_gib(x.tensor_parallel_size, x.pipeline_parallel_size, _quantization(x, spec),
                                    dtype_bytes(x.dtype))
        ratio = size(s) / size(s0)
    else:
        if ratio != 1.0:
            assumptions.append(ASSUMPTION_TP)
        if quant_changed:
            before, after = weight_bytes(s0), weight_bytes(s)
            if before is None or after is None:
                unknown.append(f"the weight size under --quantization {s.quantization or s0.quantization} is not "
                               "known from a log (give --model-config)")
                return None, float("nan")
            ratio *= after / before
            assumptions.append(ASSUMPTION_QUANT)
    offloaded = s.cpu_offload_gb - s0.cpu_offload_gb          # --cpu-offload-gb is per GPU
    if offloaded:
        assumptions.append("--cpu-offload-gb keeps that many GiB of each GPU's weights in CPU memory")
    if g.weights_gib is None:
        return None, ratio
    weights = max(0.0, g.weights_gib.value * ratio - offloaded)
    return weights, weights / g.weights_gib.value if g.weights_gib.value else ratio


def _width_ratio(s0: Settings, s: Settings) -> float:
    """KV bytes per token before / after (the dtype and how many GPUs share each token)."""
    return (kv_value_bytes(s0.kv_cache_dtype, s0.dtype) / kv_value_bytes(s.kv_cache_dtype, s.dtype)) * \
        (s.tensor_parallel_size * s.pipeline_parallel_size) / (s0.tensor_parallel_size * s0.pipeline_parallel_size)


def _bytes_per_token(g: Geometry, s: Settings, assumptions: list[str]) -> float | None:
    if g.bytes_per_token is None:
        return None
    s0 = g.settings
    spec = g.spec
    if spec is not None:
        def width(x: Settings) -> float:
            return spec.kv_bytes_per_token(x.tensor_parallel_size, x.pipeline_parallel_size,
                                           kv_value_bytes(x.kv_cache_dtype, x.dtype))
        return g.bytes_per_token.value * width(s) / width(s0)
    factor = kv_value_bytes(s.kv_cache_dtype, s.dtype) / kv_value_bytes(s0.kv_cache_dtype, s0.dtype)
    if factor != 1.0:
        assumptions.append(ASSUMPTION_FP8_KV if factor < 1 else "the KV cache returns to the model dtype: "
                           "bytes per token double")
    shards = (s0.tensor_parallel_size * s0.pipeline_parallel_size) / (s.tensor_parallel_size * s.pipeline_parallel_size)
    if shards != 1.0:
        assumptions.append(ASSUMPTION_TP)
    return g.bytes_per_token.value * factor * shards


def _request_tokens(g: Geometry, s: Settings, length: int | None) -> float | None:
    """KV one request of `length` takes, in all-layer tokens: less than `length` with sliding-window layers (V1)."""
    if not length:
        return None
    spec = g.spec
    if spec is None or not spec.has_sliding_window or g.engine != "v1":
        return length
    kvb = kv_value_bytes(s.kv_cache_dtype, s.dtype)
    batched = s.max_num_batched_tokens or 2048
    need = spec.request_kv_bytes(length, s.tensor_parallel_size, s.pipeline_parallel_size, kvb,
                                 g.block_size.value, batched)
    return need / spec.kv_bytes_per_token(s.tensor_parallel_size, s.pipeline_parallel_size, kvb)


def _starts(g: Geometry, weights: float | None, kv: float | None, blocks: int | None, request: float | None,
            length: int | None, total: float | None) -> tuple[str | None, str]:
    overhead = g.overhead_gib.value if g.overhead_gib else 0.0
    if weights is not None and total is not None and weights + overhead + LOAD_RESERVE_GIB > total:
        return "weights_dont_fit", (f"weights {weights:.2f} GiB + activations {overhead:.2f} GiB per GPU do not fit "
                                    f"the GPU's {total:.2f} GiB")
    if kv is not None and kv <= 0:
        return "kv_cache_too_small", f"no memory left for the KV cache ({kv:.2f} GiB after weights and activations)"
    if blocks is not None and request:
        need = math.ceil(request / g.block_size.value)
        proven = g.started and g.kv_tokens is not None and blocks * g.block_size.value >= g.kv_tokens.value \
            and length is not None and length <= (g.settings.max_model_len or 0)
        if blocks < need and not proven:        # what the incident itself started with, it starts with again
            return "kv_cache_too_small", (f"one {length:,}-token request needs {need * g.block_size.value:,} tokens of "
                                          f"KV cache; it holds {blocks * g.block_size.value:,}")
        return None, f"one {length:,}-token request fits"
    if blocks is not None:
        return None, "the KV cache has room"
    return "unknown", "the KV cache size cannot be predicted from these figures"


def refused(g: Geometry, s: Settings) -> str | None:
    """vLLM's own checks on the flags, before any memory is sized; None when they pass or cannot be made."""
    heads = g.limits.attention_heads
    tp = s.tensor_parallel_size
    if heads is not None and heads.value and heads.value % tp:
        return (f"vLLM refuses --tensor-parallel-size {tp}: the model's {heads.value} attention heads do not "
                f"divide evenly over {tp} GPUs")
    limit = g.limits.max_len
    if limit is not None and s.max_model_len and s.max_model_len > limit.value:
        return (f"vLLM refuses --max-model-len {s.max_model_len:,}: above the {limit.value:,} tokens the model "
                "takes (rope scaling in --hf-overrides can stretch it; VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 overrides "
                "the check at the model's peril)")
    return None


def _risks(g: Geometry, s: Settings, util: float, total: float | None, length: int | None) -> list[str]:
    out = []
    graphs = g.cuda_graph_gib.value if g.cuda_graph_gib else None
    if total and not g.graph_in_budget and not s.enforce_eager:
        outside = (1 - util) * total
        need = (graphs or 0.0) + LOAD_RESERVE_GIB
        if outside < need:
            out.append(f"only {outside:.2f} GiB stays outside the budget for CUDA graphs"
                       f"{f' ({graphs:.2f} GiB)' if graphs else ''} and the CUDA context: capture may run out of "
                       "memory (external_pressure); lower the utilization or use --enforce-eager")
    spec = g.spec
    if spec is not None and not spec.uses_latent_attention:
        heads = min(layer.kv_heads for layer in spec.attention)
        if s.tensor_parallel_size > heads:
            out.append(f"the model has {heads} KV heads: above --tensor-parallel-size {heads} they are replicated, "
                       "so KV per GPU stops shrinking")
    return out
