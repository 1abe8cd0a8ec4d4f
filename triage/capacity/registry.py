"""What the fix solvers share, and how each fix is verified through the capacity model before it is printed.

A solver computes a number from the incident's facts (and what the user gave: `UserFigures`), then asks the model
what vLLM would do with it (`outcome`): the prediction is attached to the fix, and the fix is `checked` only
when the prediction confirms it starts and does what it is for, with the safety margin below; `not_enough`
when the prediction says it fails or falls short on its own; `unchecked` when the model cannot tell, with the
input that would let it (`needs`). A fix with no number is `advice`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

from ..model import Fact, Fix
from ..vocabulary import OTHER_PROCESS_NOTABLE_GIB
from .catalog import parameter_count
from .hfconfig import ModelSpec
from .model import DERIVED, Figure, Geometry, Settings, _quantization, calibrate, dtype_bytes, weight_bytes
from .predict import NEEDS_CONFIG, NEEDS_GPU, Prediction, predict

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


@dataclass(frozen=True)
class UserFigures:
    """What the user told vtriage that the log lacks: the model's config.json (`--model-config`), the GPUs the
    node has (`--gpus`) and one GPU's memory (`--gpu NAME` or `--gpu-memory-gib`; it becomes the gpu_total_gib
    fact when the input does not print one)."""

    spec: ModelSpec | None = None
    gpus: int | None = None
    gpu_total_gib: float | None = None
    gpu_source: str = ""                 # "--gpu L4 (22.05 GiB as torch reports it ...)" or "--gpu-memory-gib"


NO_USER_FIGURES = UserFigures()
FixSolver = Callable[[Facts, UserFigures], list[Fix]]     # a fix a rule names: see the FIXES table in fixes.py


def value_of(facts: Facts, name: str) -> Any:
    fact = facts.get(name)
    return None if fact is None else fact.value


def floor2(x: float) -> float:
    return math.floor(x * 100 + 1e-9) / 100


def ceil2(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


# --- through the model -------------------------------------------------------------------------------

def geometry(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> Geometry:
    """The incident's geometry; when the weights never loaded, their size as `weights_needed` finds it."""
    g = calibrate(facts, given.spec)
    if g.weights_gib is None:
        needed = weights_needed(facts, given)
        if needed.gib is not None:
            tp = value_of(facts, "tensor_parallel_size") or 1
            how = ("at least " if needed.lower_bound else "") + needed.how
            g = dataclasses.replace(g, weights_gib=Figure(needed.gib / tp, DERIVED, how))
    return g


def outcome(facts: Facts, given: UserFigures = NO_USER_FIGURES, **changes: Any) -> Prediction:
    """What vLLM would do with the incident's flags plus `changes`."""
    g = geometry(facts, given)
    return predict(g, g.settings.replace(**changes))


def weights_leave_room(p: Prediction) -> bool:
    return p.weights_gib is not None and p.budget_gib is not None \
        and p.weights_gib <= p.budget_gib * (1 - MIN_KV_SHARE_FOR_WEIGHTS)


def verified(fix: Fix, p: Prediction, ok: bool | None, short: str | None = None,
             needs: tuple[str, ...] = ()) -> Fix:
    """Attach the prediction and the verdict on the fix: `ok` True (it starts and does what it is for: checked),
    False (it fails or falls short alone: not_enough, `short` says why), None (the model cannot tell: unchecked,
    `needs` and the prediction's own say which input would let it)."""
    informative = p.kv_gib is not None or p.kv_tokens is not None or p.weights_gib is not None or p.starts is False
    predicted = p.as_dict() if informative else None
    if ok is False and short and predicted is not None and p.starts is not False:   # it starts, but falls short
        predicted = {**predicted, "summary": f"{short}; {predicted['summary']}"}
    status = "checked" if ok and informative else "not_enough" if ok is False and informative else "unchecked"
    wanted = tuple(dict.fromkeys((*needs, *p.needs))) if status == "unchecked" else ()
    return dataclasses.replace(fix, predicted=predicted, checked=status == "checked", status=status, needs=wanted)


def starts(p: Prediction, facts: Facts, given: UserFigures = NO_USER_FIGURES) -> bool | None:
    """Whether the model says it starts. When the incident failed before the KV cache was sized (so no KV figure
    exists to move), the weights must leave a quarter of the budget; a weight size that is only a lower bound,
    or a guess from the model's name, cannot say."""
    if p.starts is not None:
        return p.starts
    sized = any(name in facts for name in ("kv_cache_gib", "kv_cache_tokens", "gpu_blocks"))
    needed = weights_needed(facts, given)
    if sized or p.weights_gib is None or p.budget_gib is None:
        return None
    if needed.lower_bound or needed.guess:
        return False if needed.lower_bound and not weights_leave_room(p) else None
    return weights_leave_room(p)


def weight_needs(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> tuple[str, ...]:
    """The inputs that would let a weight fix be checked: the GPU's memory, the real parameter count."""
    out = []
    if not value_of(facts, "gpu_total_gib"):
        out.append(NEEDS_GPU)
    needed = weights_needed(facts, given)
    if needed.gib is None or needed.guess or needed.lower_bound:
        out.append(NEEDS_CONFIG)
    return tuple(out)


# --- the weights a model needs ----------------------------------------------------------------------

class WeightsNeeded(NamedTuple):
    """Total weight size over all GPUs, how it was found, and how sure it is."""

    gib: float | None
    how: str
    lower_bound: bool          # at least this much (what the GPU held when loading failed)
    guess: bool = False        # from the model's name alone


def weights_needed(facts: Facts, given: UserFigures = NO_USER_FIGURES) -> WeightsNeeded:
    """From the log's "Model loading took", else the parameter count (config.json, the table of common models,
    or the name as a guess) x bytes per parameter, else what the GPU held when loading failed (a lower bound)."""
    tp = value_of(facts, "tensor_parallel_size") or 1
    loaded = value_of(facts, "weights_gib")
    if loaded:
        return WeightsNeeded(loaded * tp, f"{loaded:.2f} GiB per GPU x {tp}", False)
    count = parameter_count(value_of(facts, "model"), given.spec)
    quant = value_of(facts, "quantization")
    dtype = str(value_of(facts, "dtype") or "auto")
    settings = Settings(quantization=quant, dtype=dtype)
    per_param = weight_bytes(settings)
    if count is not None and given.spec is not None:
        gib = given.spec.weights_gib(1, 1, _quantization(settings, given.spec), dtype_bytes(dtype))
        return WeightsNeeded(gib, f"{count.how} in {quant or dtype}", False)
    if count is not None and per_param:
        gib = count.params * per_param / 2**30
        return WeightsNeeded(gib, f"{count.how} x {per_param:g} bytes ({quant or dtype})",
                             count.bound == "lower", count.guess)
    held = value_of(facts, "allocated_gib") or value_of(facts, "this_process_gib")
    tried = value_of(facts, "tried_to_allocate_gib") or 0.0
    if held:
        return WeightsNeeded((held + tried) * tp,
                             "what the GPU already held when loading failed, plus the failed allocation", True)
    return WeightsNeeded(None, "", True)


# --- what puts a fix first (capacity.arrange_fixes) -------------------------------------------------



def other_processes_ruled_out(facts: Facts) -> bool:
    """torch's figures (total - free - what this process held at least) leave other processes less than
    OTHER_PROCESS_NOTABLE_GIB, or less than the failed allocation needed beyond what was free: stopping them
    would not have let it succeed."""
    most = value_of(facts, "other_processes_max_gib")
    tried, free = value_of(facts, "tried_to_allocate_gib"), value_of(facts, "free_gib")
    if most is None:
        return False
    return most < OTHER_PROCESS_NOTABLE_GIB or (tried is not None and free is not None and most + free < tried)


def names_another_process(facts: Facts) -> bool:
    """The evidence shows another process holding GPU memory: an OOM's `Process N has X GiB`, a GPU
    snapshot or nvidia-smi, or DCGM's memory in use beyond vLLM's reservation."""
    others = value_of(facts, "other_processes_gib") or 0.0
    beyond = value_of(facts, "gpu_memory_beyond_budget_gib") or 0.0
    return others >= OTHER_PROCESS_NOTABLE_GIB or beyond >= 2 * OTHER_PROCESS_NOTABLE_GIB
