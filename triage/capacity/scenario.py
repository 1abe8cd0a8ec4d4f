"""The two questions the capacity model answers on the command line.

`whatif`: the incident's own geometry, moved by the flags asked for, side by side with what was logged.
`check`: before a rollout, the same prediction from a model's config.json (or a previous startup log) on a
GPU of a given size, judged as the verdict the log would show: weights_dont_fit, kv_cache_too_small,
preemption_slowdown (max_num_seqs beyond what the KV cache holds at the expected length), or fits.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..model import Fact
from ..vocabulary import DEFAULT_BLOCK_SIZE, GRAPH_BUDGET_RELEASE, default_gpu_memory_utilization
from .hfconfig import ModelSpec
from .lengths import Lengths
from .model import (
    ASSUMED,
    CONFIG,
    DERIVED,
    GIB,
    GIVEN,
    Figure,
    Geometry,
    Settings,
    _quantization,
    calibrate,
    dtype_bytes,
    kv_value_bytes,
    version_tuple,
)
from .predict import Prediction, blocks_for, predict, requests_held
from .registry import NO_USER_FIGURES, UserFigures

ASSUMED_NON_TORCH_GIB = 0.5       # CUDA context growth, NCCL and attention workspaces (0.2-0.6 in the fixture logs)
ASSUMED_GRAPH_GIB = 1.0           # CUDA graphs (0.2-1.9 GiB in the fixture logs)
MIN_ACTIVATION_GIB = 1.0
VERDICTS = ("fits", "weights_dont_fit", "kv_cache_too_small", "preemption_slowdown", "refused", "unknown")


@dataclass(frozen=True)
class Scenario:
    """A geometry, the settings asked for, and the model's verdict on them."""

    subject: str                          # the model, and the vLLM it ran on
    geometry: Geometry
    baseline: Prediction | None           # the incident as logged (what-if only)
    predicted: Prediction
    changes: Mapping[str, Any]
    lengths: Lengths | None
    lengths_source: str
    max_num_seqs: Figure | None
    verdict: str
    reason: str
    suggestions: tuple[str, ...] = ()

    def held(self, prediction: Prediction | None, which: str = "mean") -> float | None:
        if prediction is None or self.lengths is None:
            return None
        tokens = self.lengths.mean if which == "mean" else self.lengths.p90
        return requests_held(self.geometry, prediction, tokens) if tokens else None

    def verdict_of(self, prediction: Prediction) -> str:
        """The verdict a startup with this column's settings would get (the table's last row)."""
        seqs = prediction.settings.max_num_seqs or (self.max_num_seqs.value if self.max_num_seqs else None)
        return judge(self.geometry, prediction, self.lengths, seqs)[0]

    def assumptions(self) -> list[str]:
        out = self.geometry.assumptions()
        if self.max_num_seqs is not None and self.max_num_seqs.source == ASSUMED:
            out.append(f"max_num_seqs: {self.max_num_seqs.note}")
        out.extend(self.predicted.assumptions)
        return list(dict.fromkeys(out))


def judge(g: Geometry, p: Prediction, lengths: Lengths | None, max_num_seqs: int | None) -> tuple[str, str]:
    """The verdict a startup with these settings would get."""
    if p.starts is False:
        return p.problem or "kv_cache_too_small", p.reason
    if p.starts is None:
        return "unknown", "; ".join(p.unknown) or p.reason
    if lengths is not None and max_num_seqs:
        held = requests_held(g, p, lengths.mean)
        if held is not None and max_num_seqs > held:
            return "preemption_slowdown", (
                f"--max-num-seqs {max_num_seqs}, but the {p.kv_tokens:,}-token KV cache holds about {held:.0f} "
                f"requests of ~{lengths.mean:,.0f} tokens at once: under full load vLLM will preempt")
    headroom = ""
    if p.kv_tokens is not None and p.request_tokens:
        headroom = f"; {p.max_concurrency:.2f} max_model_len requests fit at once"
    return "fits", p.reason + headroom


def _max_num_seqs(settings: Settings, total: float | None, engine: str) -> Figure | None:
    if settings.max_num_seqs:
        return Figure(settings.max_num_seqs, GIVEN)
    default = 1024 if engine == "v1" and total and total >= 70 else 256
    return Figure(default, ASSUMED, f"not set; vLLM's default {default}"
                  + (" (V1 on GPUs of 70 GiB or more)" if default == 1024 else ""))


def whatif(facts: Mapping[str, Fact], changes: Mapping[str, Any], given: UserFigures = NO_USER_FIGURES,
           lengths: Lengths | None = None, lengths_source: str = "") -> Scenario:
    """The incident's geometry under `changes` (vllm serve flags by their Settings names), with what the user
    gave filling what the log lacks (the model's config, the GPU's memory) and bounding suggestions (the GPUs)."""
    g = calibrate(facts, given.spec, given.gpu_total_gib, given.gpu_source)
    baseline = predict(g)
    if g.logged_concurrency is not None:
        baseline = dataclasses.replace(baseline, max_concurrency=g.logged_concurrency)
    settings = g.settings.replace(**changes)
    p = predict(g, settings)
    total = g.total_gib.value if g.total_gib else None
    seqs = _max_num_seqs(settings, total, g.engine)
    verdict, reason = judge(g, p, lengths, seqs.value if seqs else None)
    model = facts["model"].value if "model" in facts else "the model"
    version = facts["vllm_version"].value if "vllm_version" in facts else None
    subject = f"{model} on vLLM {version or '?'} ({g.engine.upper()})"
    return Scenario(subject, g, baseline, p, dict(changes), lengths, lengths_source, seqs, verdict, reason,
                    tuple(suggest(g, p, settings, lengths, seqs, given.gpus)))


# --- a pre-deploy check from config.json -----------------------------------------------------------

def estimate_activation_gib(spec: ModelSpec, s: Settings) -> float:
    """The profiling run's peak: one batch of max_num_batched_tokens through the widest layer (the gated
    MLP's gate-and-up output) beside the residual and normed hidden states, and the sampler's float32 logits
    (and their softmax) for max_num_seqs."""
    tokens = s.max_num_batched_tokens or 2048
    width = 2 * spec.intermediate_size / s.tensor_parallel_size + 2 * spec.hidden_size
    logits = (s.max_num_seqs or 256) * spec.vocab_size * 8
    return max(MIN_ACTIVATION_GIB, (tokens * width * 2 + logits) / GIB)


def config_geometry(spec: ModelSpec, gpu_total_gib: float, settings: Settings, vllm_version: str | None = None,
                    sliding_window: bool = True, gpu_source: str = "given") -> Geometry:
    """What a startup of this model on this GPU would log, every figure not in config.json assumed and said so."""
    version = version_tuple(vllm_version)
    if version is None or version >= GRAPH_BUDGET_RELEASE:
        era, engine = "v1-graph-budget", "v1"
    elif version >= (0, 8):
        era, engine = "v1", "v1"
    else:
        era, engine = ("v0-profile" if version >= (0, 6, 4) else "v0-blocks"), "v0"
    default_util = default_gpu_memory_utilization(GRAPH_BUDGET_RELEASE if era == "v1-graph-budget" else version)
    util = Figure(settings.gpu_memory_utilization, GIVEN) if settings.gpu_memory_utilization else \
        Figure(default_util, ASSUMED, f"not set; vLLM's default {default_util}")
    big = gpu_total_gib >= 70
    length = settings.max_model_len or spec.max_position_embeddings
    if engine == "v1":
        batched = 8192 if big else 2048                    # vLLM's V1 API-server defaults
    else:                                                  # V0 prefills whole prompts unless they exceed 32K
        batched = max(length or 0, 2048) if (length or 0) <= 32768 else 2048
    settings = settings.replace(
        gpu_memory_utilization=util.value, max_model_len=length,
        max_num_batched_tokens=settings.max_num_batched_tokens or batched,
        max_num_seqs=settings.max_num_seqs or (1024 if big and engine == "v1" else 256))
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    quant = _quantization(settings, spec)
    base = dtype_bytes(settings.dtype if settings.dtype != "auto" else spec.torch_dtype)
    if base > 2 and settings.dtype == "auto":
        base = 2.0                                         # vLLM casts float32 checkpoints to 16-bit
    weights = spec.weights_gib(tp, pp, quant, base)
    activation = estimate_activation_gib(spec, settings)
    graphs = 0.0 if settings.enforce_eager else ASSUMED_GRAPH_GIB
    kvb = kv_value_bytes(settings.kv_cache_dtype, "float16" if base == 2 else "float32")
    per_token = spec.kv_bytes_per_token(tp, pp, kvb)
    in_budget = graphs if era == "v1-graph-budget" else 0.0
    kv = gpu_total_gib * util.value - weights - activation - ASSUMED_NON_TORCH_GIB - in_budget
    block = DEFAULT_BLOCK_SIZE
    tokens = blocks_for(kv, per_token, block) * block if kv > 0 else 0
    if not sliding_window:
        spec = dataclasses.replace(spec, attention=tuple(dataclasses.replace(a, kind="full", window=None)
                                                         if a.kind == "sliding" else a for a in spec.attention))
    eq = "budget - weights - activation - non-torch" + (" - CUDA graph estimate" if in_budget else "")
    return Geometry(
        era=era, engine=engine, settings=settings, total_gib=Figure(gpu_total_gib, GIVEN, gpu_source),
        utilization=util, weights_gib=Figure(weights, CONFIG, "parameters x bytes per parameter, split over the GPUs"),
        activation_gib=Figure(activation, ASSUMED, "estimated from max_num_batched_tokens, the MLP width and the "
                              f"sampler's logits (at least {MIN_ACTIVATION_GIB:g} GiB); a startup log measures it"),
        non_torch_gib=Figure(ASSUMED_NON_TORCH_GIB, ASSUMED,
                             f"{ASSUMED_NON_TORCH_GIB} GiB (CUDA context growth, NCCL)"),
        overhead_gib=Figure(activation + ASSUMED_NON_TORCH_GIB, DERIVED, "activation + non-torch"),
        cuda_graph_gib=Figure(graphs, ASSUMED, "none with --enforce-eager" if settings.enforce_eager else
                              f"{ASSUMED_GRAPH_GIB} GiB (0.2-1.9 GiB in measured startups)"),
        kv_gib=Figure(kv, DERIVED, eq), kv_tokens=Figure(tokens, DERIVED, "blocks x block size"),
        bytes_per_token=Figure(per_token, CONFIG, "layers x KV heads per GPU x head dim x 2 x bytes"),
        block_size=Figure(block, ASSUMED, f"vLLM's default {DEFAULT_BLOCK_SIZE}"), spec=spec)


def check(facts: Mapping[str, Fact] | None, given: UserFigures, settings: Settings, changes: Mapping[str, Any],
          lengths: Lengths | None, vllm_version: str | None = None, sliding_window: bool = True) -> Scenario:
    """The verdict before rollout: from a previous startup log when given (calibrated), else from the config.json
    and the GPU's memory the user gave."""
    source = ("expected (--expect-*-tokens)" if lengths.window == "expected" else "observed in the metrics") \
        if lengths else ""
    if facts is not None:
        return whatif(facts, changes, given, lengths, source)
    spec, gpu_total_gib = given.spec, given.gpu_total_gib
    if spec is None or not gpu_total_gib:
        raise ValueError("a check needs a config.json and the GPU's memory, or a startup log")
    g = config_geometry(spec, gpu_total_gib, settings, vllm_version, sliding_window, given.gpu_source)
    p = predict(g)
    seqs = Figure(g.settings.max_num_seqs, GIVEN if settings.max_num_seqs else ASSUMED,
                  "" if settings.max_num_seqs else f"not set; vLLM's default {g.settings.max_num_seqs}")
    verdict, reason = judge(g, p, lengths, seqs.value)
    subject = f"{spec.path.rsplit('/', 1)[-1]} ({spec.model_type}, {spec.total_params / 1e9:.2f}B parameters) on " \
              f"{gpu_total_gib:g} GiB GPUs"
    return Scenario(subject, g, None, p, dict(changes), lengths, source, seqs, verdict, reason,
                    tuple(suggest(g, p, g.settings, lengths, seqs, given.gpus)))


# --- what would make it fit --------------------------------------------------------------------------

def suggest(g: Geometry, p: Prediction, s: Settings, lengths: Lengths | None, seqs: Figure | None,
            max_gpus: int | None = None) -> list[str]:
    """The nearest settings the model predicts would work, each checked by predicting it."""
    out = []
    limit = g.limits.max_len
    if p.problem == "refused" and limit is not None and s.max_model_len and s.max_model_len > limit.value:
        if predict(g, s.replace(max_model_len=limit.value)).starts:
            out.append(f"--max-model-len {limit.value} is the longest the model takes without rope scaling")
    if p.problem == "kv_cache_too_small" and p.kv_tokens and s.max_model_len:
        longest = p.kv_tokens
        if predict(g, s.replace(max_model_len=longest)).starts:
            out.append(f"--max-model-len {longest} fits the KV cache as it is")
    if p.problem == "kv_cache_too_small" and g.total_gib and s.max_model_len and p.bytes_per_token \
            and p.kv_gib is not None:
        need = math.ceil(s.max_model_len / g.block_size.value) * g.block_size.value * p.bytes_per_token / GIB
        util = math.ceil((s.gpu_memory_utilization + (need - p.kv_gib) / g.total_gib.value + 0.01) * 100) / 100
        if util <= 0.95 and predict(g, s.replace(gpu_memory_utilization=util)).starts:
            out.append(f"--gpu-memory-utilization {util:.2f} fits max_model_len {s.max_model_len}")
    if p.problem in ("weights_dont_fit", "kv_cache_too_small"):
        for tp in (2, 4, 8, 16):
            if max_gpus is not None and tp * s.pipeline_parallel_size > max_gpus:
                break
            if tp > s.tensor_parallel_size and predict(g, s.replace(tensor_parallel_size=tp)).starts:  # heads divide
                out.append(f"--tensor-parallel-size {tp} fits")
                break
    if p.starts and lengths is not None and seqs is not None:
        held = requests_held(g, p, lengths.mean)
        if held is not None and seqs.value > held:
            out.append(f"--max-num-seqs {max(1, math.floor(held * 0.9))} keeps the KV cache near 90 % at "
                       f"~{lengths.mean:,.0f} tokens per request")
    return out
