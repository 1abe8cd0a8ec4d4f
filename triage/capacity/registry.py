"""The fix solvers rules name, and how each fix is verified through the capacity model before it is printed.

A solver computes a number from the incident's facts, then asks the model what vLLM would do with it
(`outcome`): the prediction is attached to the fix, and the fix is `checked` only when the prediction
confirms it does what it is for, with the safety margin below. A fix the model cannot check stays unchecked.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import re

from ..model import Fact, Fix
from .model import DERIVED, Figure, Geometry, Settings, calibrate, weight_bytes
from .predict import Prediction, predict

DOCS_MEMORY = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"
DOCS_PREEMPTION = "https://docs.vllm.ai/en/latest/configuration/optimization/#preemption"
DOCS_FP8_KV = "https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache/"
DOCS_ENGINE_ARGS = "https://docs.vllm.ai/en/latest/configuration/engine_args/"
DOCS_TROUBLESHOOTING = "https://docs.vllm.ai/en/latest/usage/troubleshooting/"

SAFETY_MARGIN_RATIO = 0.02        # kept free of the GPU when raising or capping utilization
HEADROOM_MARGIN_GIB = 0.5         # beyond the failed allocation when lowering utilization
MAX_PRACTICAL_UTILIZATION = 0.95
MIN_KV_SHARE_FOR_WEIGHTS = 0.25   # a weight fix must leave this share of the budget for activations and KV
TARGET_KV_USAGE = 0.9             # what --max-num-seqs aims the KV cache at under load

Facts = Mapping[str, Fact]
FixSolver = Callable[[Facts], list[Fix]]
FIXES: dict[str, FixSolver] = {}


def solver(name: str) -> Callable[[FixSolver], FixSolver]:
    def register(fn: FixSolver) -> FixSolver:
        FIXES[name] = fn
        return fn
    return register


def value_of(facts: Facts, name: str) -> Any:
    fact = facts.get(name)
    return None if fact is None else fact.value


def floor2(x: float) -> float:
    return math.floor(x * 100 + 1e-9) / 100


def ceil2(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


# --- through the model -------------------------------------------------------------------------------

def geometry(facts: Facts) -> Geometry:
    """The incident's geometry; when the weights never loaded, their size as `weights_needed` finds it."""
    g = calibrate(facts)
    if g.weights_gib is None:
        total, how, lower_bound = weights_needed(facts)
        if total is not None:
            tp = value_of(facts, "tensor_parallel_size") or 1
            g = dataclasses.replace(g, weights_gib=Figure(total / tp, DERIVED, ("at least " if lower_bound else "") + how))
    return g


def outcome(facts: Facts, **changes: Any) -> Prediction:
    """What vLLM would do with the incident's flags plus `changes`."""
    g = geometry(facts)
    return predict(g, g.settings.replace(**changes))


def weights_leave_room(p: Prediction) -> bool:
    return p.weights_gib is not None and p.budget_gib is not None \
        and p.weights_gib <= p.budget_gib * (1 - MIN_KV_SHARE_FOR_WEIGHTS)


def verified(fix: Fix, p: Prediction, ok: bool) -> Fix:
    """Attach the prediction; `checked` only when the model confirmed the fix."""
    informative = p.kv_gib is not None or p.kv_tokens is not None or p.weights_gib is not None
    return dataclasses.replace(fix, predicted=p.as_dict() if informative else None, checked=bool(ok and informative))


def starts(p: Prediction, facts: Facts) -> bool:
    """The model says it starts. When the incident failed before the KV cache was sized (so no KV figure exists
    to move), the weights at least leave a quarter of the budget; a weight size that is only a lower bound never."""
    if p.starts is not None:
        return p.starts
    sized = any(name in facts for name in ("kv_cache_gib", "kv_cache_tokens", "gpu_blocks"))
    return not sized and not weights_needed(facts)[2] and weights_leave_room(p)


# --- the weights a model needs ----------------------------------------------------------------------

def params_from_name(model: str | None) -> float | None:
    """'Qwen2-7B-Instruct' -> 7e9; mixture names like 8x7B multiply."""
    if not model:
        return None
    m = re.search(r"(?:(\d+)x)?(\d+(?:\.\d+)?)\s?[Bb](?![a-zA-Z])", model.split("/")[-1])
    if not m:
        return None
    return float(m.group(2)) * 1e9 * (int(m.group(1)) if m.group(1) else 1)


def weights_needed(facts: Facts) -> tuple[float | None, str, bool]:
    """Total weight size over all GPUs: (GiB, how it was found, whether it is only a lower bound)."""
    tp = value_of(facts, "tensor_parallel_size") or 1
    loaded = value_of(facts, "weights_gib")
    if loaded:
        return loaded * tp, f"{loaded:.2f} GiB per GPU x {tp}", False
    params = params_from_name(value_of(facts, "model"))
    quant = value_of(facts, "quantization")
    dtype = str(value_of(facts, "dtype") or "auto")
    per_param = weight_bytes(Settings(quantization=quant, dtype=dtype))
    if params and per_param:
        gib = params * per_param / 2**30
        return gib, f"{params / 1e9:g}B parameters x {per_param:g} bytes ({quant or dtype}) from the model name", False
    held = value_of(facts, "allocated_gib") or value_of(facts, "this_process_gib")
    tried = value_of(facts, "tried_to_allocate_gib") or 0.0
    if held:
        return (held + tried) * tp, "what the GPU already held when loading failed, plus the failed allocation", True
    return None, "", True
