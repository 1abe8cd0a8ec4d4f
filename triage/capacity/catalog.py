"""What a model is when the log names it but no config.json is given: a small table of common models.

A parameter count is taken from the model's config.json first (`--model-config`, counted by hfconfig),
then from this table, and only then from the name, marked as a guess: a name says "8x7B" for a mixture
of experts whose experts share their attention layers (Mixtral-8x7B has 46.7 B parameters, not 56 B) and
"17B-16E" for one whose 17 B are only the active ones. The table also gives the attention heads
(tensor parallelism must divide them) and the context the model was trained for (vLLM refuses a longer
max_model_len unless rope scaling stretches it).

Figures are the published ones (each model's config.json and model card on huggingface.co); the tests hold
the entries that have a config in fixtures/configs/ to the parameters counted from it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..facts.registry import FACTS
from ..model import Fact
from .hfconfig import ModelSpec


@dataclass(frozen=True)
class KnownModel:
    name: str
    params_b: float                      # every parameter, every expert: what sits in GPU memory
    attention_heads: int
    kv_heads: int
    max_position_embeddings: int         # the context of its config.json (with the rope scaling it ships with)
    experts: tuple[int, int] | None = None     # (experts, active per token)


def _m(pattern: str, name: str, params_b: float, heads: int, kv: int, positions: int,
       experts: tuple[int, int] | None = None) -> tuple[re.Pattern[str], KnownModel]:
    return re.compile(pattern), KnownModel(name, params_b, heads, kv, positions, experts)


# Searched in order in the lower-cased last part of the model id; the first match wins, so a more specific
# name comes before a looser one (Llama-3.1 before Llama-3, Qwen2.5 before Qwen2).
KNOWN_MODELS: tuple[tuple[re.Pattern[str], KnownModel], ...] = (
    _m(r"llama-?2-7b", "Llama-2-7B", 6.74, 32, 32, 4096),
    _m(r"llama-?2-13b", "Llama-2-13B", 13.02, 40, 40, 4096),
    _m(r"llama-?2-70b", "Llama-2-70B", 68.98, 64, 8, 4096),
    _m(r"llama-?3\.[123]-8b", "Llama-3.1-8B", 8.03, 32, 8, 131072),
    _m(r"llama-?3\.[13]-70b", "Llama-3.1-70B", 70.55, 64, 8, 131072),
    _m(r"llama-?3\.1-405b", "Llama-3.1-405B", 405.85, 128, 8, 131072),
    _m(r"llama-?3\.2-1b", "Llama-3.2-1B", 1.24, 32, 8, 131072),
    _m(r"llama-?3\.2-3b", "Llama-3.2-3B", 3.21, 24, 8, 131072),
    _m(r"llama-?3-8b", "Llama-3-8B", 8.03, 32, 8, 8192),
    _m(r"llama-?3-70b", "Llama-3-70B", 70.55, 64, 8, 8192),
    _m(r"llama-4-scout-17b-16e", "Llama-4-Scout-17B-16E", 108.64, 40, 8, 10485760, (16, 1)),
    _m(r"llama-4-maverick-17b-128e", "Llama-4-Maverick-17B-128E", 401.58, 40, 8, 1048576, (128, 1)),
    _m(r"mixtral-8x7b", "Mixtral-8x7B", 46.70, 32, 8, 32768, (8, 2)),
    _m(r"mixtral-8x22b", "Mixtral-8x22B", 140.62, 48, 8, 65536, (8, 2)),
    _m(r"mistral-small-3\.[12]-24b", "Mistral-Small-3.1-24B", 24.01, 32, 8, 131072),
    _m(r"mistral-small-(?:3-)?24b", "Mistral-Small-24B", 23.57, 32, 8, 32768),
    _m(r"ministral-8b", "Ministral-8B", 8.02, 32, 8, 32768),
    _m(r"mistral-7b", "Mistral-7B", 7.24, 32, 8, 32768),
    _m(r"qwen1\.5-7b", "Qwen1.5-7B", 7.72, 32, 32, 32768),
    _m(r"qwen2\.5-(?:coder-)?0\.5b", "Qwen2.5-0.5B", 0.49, 14, 2, 32768),
    _m(r"qwen2\.5-(?:coder-)?1\.5b", "Qwen2.5-1.5B", 1.54, 12, 2, 32768),
    _m(r"qwen2\.5-(?:coder-)?3b", "Qwen2.5-3B", 3.09, 16, 2, 32768),
    _m(r"qwen2\.5-(?:coder-|math-)?7b", "Qwen2.5-7B", 7.62, 28, 4, 32768),
    _m(r"qwen2\.5-(?:coder-)?14b", "Qwen2.5-14B", 14.77, 40, 8, 32768),
    _m(r"qwen2\.5-(?:coder-)?32b", "Qwen2.5-32B", 32.76, 40, 8, 32768),
    _m(r"qwen2\.5-(?:math-)?72b", "Qwen2.5-72B", 72.71, 64, 8, 32768),
    _m(r"qwen2-vl-72b", "Qwen2-VL-72B", 73.41, 64, 8, 32768),
    _m(r"qwen2-57b-a14b", "Qwen2-57B-A14B", 57.41, 28, 4, 32768, (64, 8)),
    _m(r"qwen2-7b", "Qwen2-7B", 7.62, 28, 4, 32768),
    _m(r"qwen2-72b", "Qwen2-72B", 72.71, 64, 8, 32768),
    _m(r"qwen3-30b-a3b-(?:instruct|thinking)-2507", "Qwen3-30B-A3B-2507", 30.53, 32, 4, 262144, (128, 8)),
    _m(r"qwen3-30b-a3b", "Qwen3-30B-A3B", 30.53, 32, 4, 40960, (128, 8)),
    _m(r"qwen3-235b-a22b-(?:instruct|thinking)-2507", "Qwen3-235B-A22B-2507", 235.09, 64, 4, 262144, (128, 8)),
    _m(r"qwen3-235b-a22b", "Qwen3-235B-A22B", 235.09, 64, 4, 40960, (128, 8)),
    _m(r"qwen3-4b", "Qwen3-4B", 4.02, 32, 8, 40960),
    _m(r"qwen3-8b", "Qwen3-8B", 8.19, 32, 8, 40960),
    _m(r"qwen3-14b", "Qwen3-14B", 14.77, 40, 8, 40960),
    _m(r"qwen3-32b", "Qwen3-32B", 32.76, 64, 8, 40960),
    _m(r"gemma-2-2b", "Gemma-2-2B", 2.61, 8, 4, 8192),
    _m(r"gemma-2-9b", "Gemma-2-9B", 9.24, 16, 8, 8192),
    _m(r"gemma-2-27b", "Gemma-2-27B", 27.23, 32, 16, 8192),
    _m(r"gemma-3-12b", "Gemma-3-12B", 12.19, 16, 8, 131072),
    _m(r"gemma-3-27b", "Gemma-3-27B", 27.43, 32, 16, 131072),
    _m(r"phi-4-mini", "Phi-4-mini", 3.84, 24, 8, 131072),
    _m(r"phi-4(?!-)", "Phi-4", 14.66, 40, 10, 16384),
    _m(r"yi-34b(?!-200k)", "Yi-34B", 34.39, 56, 8, 4096),
    _m(r"gpt-oss-20b", "gpt-oss-20b", 20.91, 64, 8, 131072, (32, 4)),
    _m(r"gpt-oss-120b", "gpt-oss-120b", 116.83, 64, 8, 131072, (128, 4)),
    _m(r"deepseek-v2-lite", "DeepSeek-V2-Lite", 15.71, 16, 16, 163840, (64, 6)),
    _m(r"deepseek-(?:v3|r1)(?!-distill)", "DeepSeek-V3", 671.03, 128, 128, 163840, (256, 8)),
)

_MIXTURE = re.compile(r"(?<![\d.])(\d+)x(\d+(?:\.\d+)?)b(?![a-z])")
_SIZE = re.compile(r"(?<![\d.a-z])(\d+(?:\.\d+)?)b(?![a-z])")
_ACTIVE_ONLY = re.compile(r"-\d+e(?![a-z])")            # Llama-4's "17B-16E": the size is the active part


def _short(model: str) -> str:
    return model.rstrip("/").split("/")[-1].lower()


def known_model(model: str | None) -> KnownModel | None:
    if not model:
        return None
    short = _short(model)
    return next((known for pattern, known in KNOWN_MODELS if pattern.search(short)), None)


@dataclass(frozen=True)
class ParameterCount:
    """A model's total parameters and how sure that number is."""

    params: float
    source: str                  # "config" | "table" | "name"
    how: str                     # in words, for the fix and the facts
    bound: str | None = None     # "upper" / "lower" when a name only bounds it; None when it is the count

    @property
    def guess(self) -> bool:
        return self.source == "name"


def parameter_count(model: str | None, spec: ModelSpec | None = None) -> ParameterCount | None:
    """From the config.json when given, then the table, then the name (a guess)."""
    if spec is not None:
        return ParameterCount(spec.total_params, "config",
                              f"{spec.total_params / 1e9:.2f} B parameters counted from {spec.path}")
    known = known_model(model)
    if known is not None:
        moe = f", all {known.experts[0]} experts" if known.experts else ""
        return ParameterCount(known.params_b * 1e9, "table", f"{known.params_b:g} B parameters ({known.name}{moe})")
    if not model:
        return None
    short = _short(model)
    mixture = _MIXTURE.search(short)
    if mixture:
        experts, size = int(mixture.group(1)), float(mixture.group(2))
        return ParameterCount(experts * size * 1e9, "name",
                              f"at most {experts * size:g} B parameters, guessed from the name "
                              f"'{mixture.group(0)}' (the experts share their attention layers, so the real total "
                              "is lower; --model-config counts it)", bound="upper")
    named = _SIZE.search(short)
    if named:
        active = bool(_ACTIVE_ONLY.search(short[named.end():]))
        note = (" (only the active parameters: the experts add more; --model-config counts them)" if active
                else " (--model-config counts them)")
        return ParameterCount(float(named.group(1)) * 1e9, "name",
                              f"{float(named.group(1)):g} B parameters, guessed from the name{note}",
                              bound="lower" if active else None)
    return None


# --- GPUs: their memory as torch reports it (`total_memory`, what vLLM budgets a share of) ------------------

@dataclass(frozen=True)
class KnownGpu:
    name: str
    total_gib: float
    how: str


_GPUS: tuple[tuple[tuple[str, ...], KnownGpu], ...] = (
    (("l4",), KnownGpu("NVIDIA L4", 22.05, "as torch reports it in real L4 logs")),
    (("a10g",), KnownGpu("NVIDIA A10G", 22.19, "as torch reports it in real A10G logs")),
    (("l40s", "l40"), KnownGpu("NVIDIA L40S", 44.39, "as torch reports it in real L40S logs")),
    (("a100-40", "a100-40g", "a100-40gb", "a100-sxm4-40gb", "a100-pcie-40gb"),
     KnownGpu("NVIDIA A100 40GB", 39.39, "as torch reports it on an A100 40GB")),
    (("a100-80", "a100", "a100-80g", "a100-80gb", "a100-sxm4-80gb", "a100-pcie-80gb"),
     KnownGpu("NVIDIA A100 80GB", 79.25, "as torch reports it in real A100 80GB logs")),
    (("h100", "h100-80", "h100-80gb", "h100-sxm", "h100-sxm5-80gb", "h100-80gb-hbm3"),
     KnownGpu("NVIDIA H100 80GB", 79.19, "as torch reports it in real H100 logs")),
    (("h100-nvl", "h100nvl"), KnownGpu("NVIDIA H100 NVL", 93.09, "as torch reports it in a real H100 NVL log")),
    (("h200", "h200-141gb"), KnownGpu("NVIDIA H200", 139.80, "as torch reports it on a real H200 (143771 MiB)")),
    (("mi300x",), KnownGpu("AMD Instinct MI300X", 191.98, "192 GiB of HBM3 as torch on ROCm reports it")),
    (("rtx-3090", "rtx3090", "3090"), KnownGpu("NVIDIA GeForce RTX 3090", 23.56,
                                               "as torch reports it in a real RTX 3090 log")),
    (("rtx-4090", "rtx4090", "4090"), KnownGpu("NVIDIA GeForce RTX 4090", 23.65,
                                               "as torch reports it in RTX 4090 logs")),
)
GPU_NAMES: tuple[str, ...] = tuple(names[0].upper() for names, _ in _GPUS)


def known_gpu(name: str) -> KnownGpu | None:
    """`--gpu NAME`: L4, A10G, L40S, A100-40, A100-80, H100, H100-NVL, H200, MI300X, RTX-3090, RTX-4090 (any case;
    `NVIDIA ` and spaces or underscores for dashes are accepted)."""
    key = re.sub(r"[\s_]+", "-", name.strip().lower()).removeprefix("nvidia-").removeprefix("geforce-")
    key = key.removeprefix("amd-").removeprefix("instinct-")
    return next((gpu for names, gpu in _GPUS if key in names), None)


def estimate_facts(facts: Mapping[str, Any], spec: ModelSpec | None = None) -> dict[str, Any]:
    """When the weights never loaded (a log cut after the engine config, say): the model's parameters and the
    weights one GPU would hold, as facts the rules can weigh (an estimate, and said to be one)."""
    from .model import Settings, weight_bytes  # model.py imports this table: imported here, not at the top
    if "weights_gib" in facts or "model" not in facts:
        return {}
    count = parameter_count(facts["model"].value, spec)
    if count is None:
        return {}
    evidence = facts["model"].evidence

    def value(name: str) -> Any:
        return facts[name].value if name in facts else None
    quant, dtype = value("quantization"), str(value("dtype") or "auto")
    per_param = weight_bytes(Settings(quantization=quant, dtype=dtype))
    tp, pp = value("tensor_parallel_size") or 1, value("pipeline_parallel_size") or 1
    out = {"model_params_b": Fact("model_params_b", round(count.params / 1e9, 2), FACTS["model_params_b"].unit,
                                  evidence, count.how)}
    if per_param and count.bound != "lower":
        gib = (spec.weights_gib(tp, pp, None, per_param) if spec is not None and not quant
               else count.params * per_param / 2**30 / (tp * pp))
        gpus = tp * pp
        basis = (f"{count.how} x {per_param:g} bytes ({quant or dtype.removeprefix('torch.')})"
                 + (f" / {gpus} GPUs" if gpus > 1 else ""))
        out["weights_estimate_gib"] = Fact("weights_estimate_gib", round(gib, 2), "GiB", evidence,
                                           ("an estimate: " if count.source != "config" else "") + basis)
    return out
