"""vLLM's memory budget on one GPU, calibrated from one startup's own figures (or from a model's config).

    budget = gpu_memory_utilization x total
    KV     = budget - weights - activation peak - non-torch   [- CUDA graph estimate, V1 0.20+]
    blocks = floor(KV bytes / (block_size x KV bytes per token)),   tokens = blocks x block_size
    V0: concurrency = tokens / max_model_len;   V1: blocks / ceil(max_model_len / block_size)

A startup log reveals the KV bytes per token itself (available KV memory / KV tokens), so no model config
is needed to answer "what if". A prediction starts from the incident's own KV memory and moves it by what
the change moves (utilization x total, the weights, the graph estimate), so figures the log does not print
(the activation peak, non-torch memory) are carried over unchanged: that is an assumption, and it is
listed with every prediction. Pure: facts in, figures out.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..model import Fact
from ..vocabulary import DEFAULT_BLOCK_SIZE, GRAPH_BUDGET_RELEASE, default_gpu_memory_utilization
from .hfconfig import ModelSpec, Quantization, int_quantization

GIB = 1 << 30
LOAD_RESERVE_GIB = 0.5        # CUDA context and allocator slack outside torch's figures while loading
LOGGED, DERIVED, ASSUMED, CONFIG, GIVEN = "logged", "derived", "assumed", "config", "given"

DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0}
# bytes per weight of the linear layers under each --quantization (scales included for the integer ones)
QUANTIZATION_BYTES: Mapping[str, float] = {
    "fp8": 1.0, "fbgemm_fp8": 1.0, "modelopt": 1.0, "ptpc_fp8": 1.0,
    "awq": int_quantization("awq", 4).bytes_per_param, "awq_marlin": int_quantization("awq", 4).bytes_per_param,
    "gptq": int_quantization("gptq", 4).bytes_per_param, "gptq_marlin": int_quantization("gptq", 4).bytes_per_param,
    "bitsandbytes": int_quantization("bitsandbytes", 4, 64).bytes_per_param, "mxfp4": 4.25 / 8,
}
ASSUMPTION_FP8_KV = ("--kv-cache-dtype fp8 stores 1 byte per KV value instead of the model dtype's 2: "
                     "bytes per token halve")
ASSUMPTION_TP = ("tensor parallelism splits the weights and every token's KV heads over the GPUs, so each GPU holds "
                 "a smaller slice and more KV tokens (true while the size is at most the model's KV heads)")
ASSUMPTION_QUANT = ("--quantization shrinks the linear weights: fp8 about 1 byte per parameter, AWQ/GPTQ int4 about "
                    "0.5 byte plus scales; embeddings stay 16-bit, so from a log alone the saving is an upper bound")
ASSUMPTION_CONSTANT = ("activation peak, non-torch and CUDA graph memory stay as measured at the incident's settings "
                       "(they grow a little with max-num-seqs / max-num-batched-tokens, not with utilization)")


@dataclass(frozen=True)
class Figure:
    """A number and where it came from: logged, derived (arithmetic on logged figures), assumed, config, given;
    and, for a derived one, how far off it can be from the rounding of the figures it comes from."""

    value: Any
    source: str
    note: str = ""
    uncertainty: float = 0.0          # +/- in the figure's own unit; 0 when exact or unknown


PRINTED_GIB = 0.005                   # vLLM prints GiB to two decimals: a printed figure is within this


def honest(value: float, uncertainty: float) -> float:
    """`value` rounded to the power of ten its uncertainty allows (147,454 +/- 183 -> 147,500)."""
    if not uncertainty or uncertainty <= 0:
        return value
    step = 10 ** math.floor(math.log10(uncertainty))
    return round(value / step) * step


def shown(value: float, uncertainty: float, unit: str = "") -> str:
    """A figure as it may be shown: rounded to what its inputs support, with the margin when there is one."""
    if not uncertainty:
        return f"{value:,.0f}{unit}"
    margin = float(f"{uncertainty:.2g}")
    return f"{honest(value, uncertainty):,.0f}{unit} (±{margin:,.0f})"

    def __str__(self) -> str:
        return f"{self.value} ({self.source}{': ' + self.note if self.note else ''})"


@dataclass(frozen=True)
class Settings:
    """The vllm serve flags the budget depends on."""

    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    quantization: str | None = None
    enforce_eager: bool = False
    cpu_offload_gb: float = 0.0

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def dtype_bytes(dtype: str | None) -> float:
    name = str(dtype or "auto").removeprefix("torch.")
    return DTYPE_BYTES.get(name, 2.0)        # auto: vLLM serves 16-bit (float32 checkpoints are cast down)


def kv_value_bytes(kv_cache_dtype: str | None, dtype: str | None) -> float:
    kind = str(kv_cache_dtype or "auto")
    if kind.startswith("fp8"):
        return 1.0
    return dtype_bytes(dtype if kind == "auto" else kind)


def weight_bytes(settings: Settings) -> float | None:
    """Bytes per linear weight; None for a quantization whose size a log cannot tell (compressed-tensors, gguf)."""
    if settings.quantization:
        return QUANTIZATION_BYTES.get(settings.quantization)
    return dtype_bytes(settings.dtype)


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    parts = []
    for piece in str(version).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


# --- the calibrated geometry ----------------------------------------------------------------------

ERAS = {
    "v0-blocks": "V0 <= 0.6.3: '# GPU blocks' only",
    "v0-profile": "V0 0.6.4+: profiling line / 3-line block",
    "v1": "V1: 'Available KV cache memory'",
    "v1-usage": "V1 0.10.2+: 'Free memory on device ... Actual usage'",
    "v1-graph-budget": "V1 0.20+: CUDA graph estimate inside the budget",
}


@dataclass(frozen=True)
class ModelLimits:
    """What vLLM checks the flags against before it sizes anything: the tensor-parallel size must divide the
    model's attention heads, and max_model_len may not exceed the model's context (as its config and the
    launch's rope scaling stretch it) unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."""

    attention_heads: Figure | None
    max_len: Figure | None


@dataclass(frozen=True)
class Geometry:
    """One GPU's memory as one startup (or a config) shows it, every figure with its source."""

    era: str
    engine: str                       # v0 | v1
    settings: Settings
    total_gib: Figure | None
    utilization: Figure
    weights_gib: Figure | None
    activation_gib: Figure | None
    non_torch_gib: Figure | None
    overhead_gib: Figure | None       # activation + non-torch: all a log may let us know of the two
    cuda_graph_gib: Figure | None
    kv_gib: Figure | None
    kv_tokens: Figure | None
    bytes_per_token: Figure | None    # KV bytes per token on one GPU
    block_size: Figure
    logged_concurrency: float | None = None
    spec: ModelSpec | None = None
    limits: ModelLimits = ModelLimits(None, None)
    started: bool = False             # the incident itself got past sizing its KV cache (it served, or said so)

    @property
    def graph_in_budget(self) -> bool:
        return self.era == "v1-graph-budget"

    @property
    def budget_gib(self) -> float | None:
        if self.total_gib is None:
            return None
        return self.total_gib.value * self.utilization.value

    def figures(self) -> dict[str, Figure | None]:
        return {"GPU total": self.total_gib, "gpu_memory_utilization": self.utilization, "weights": self.weights_gib,
                "activation peak": self.activation_gib, "non-torch memory": self.non_torch_gib,
                "activation + non-torch": self.overhead_gib, "CUDA graphs": self.cuda_graph_gib,
                "KV cache memory": self.kv_gib, "KV cache tokens": self.kv_tokens,
                "KV bytes per token": self.bytes_per_token, "block size": self.block_size}

    def assumptions(self) -> list[str]:
        """What the model had to assume or could not find, in words."""
        out = [f"{name}: {fig.note}" for name, fig in self.figures().items() if fig is not None
               and fig.source == ASSUMED]
        if self.activation_gib is None and self.overhead_gib is None and self.kv_gib is not None:
            out.append("activation peak and non-torch memory: not in the log; assumed constant across utilizations "
                       "and lengths")
        if self.total_gib is None:
            out.append("GPU total: unknown (not in the log)")
        if self.bytes_per_token is None:
            out.append("KV bytes per token: unknown (the log prints no KV memory next to a token count)")
        return out

    def equation_kv_gib(self) -> float | None:
        """KV memory from the budget equation alone, when every term is measured (not derived from KV itself)."""
        budget, weights = self.budget_gib, self.weights_gib
        activation, non_torch = self.activation_gib, self.non_torch_gib
        if budget is None or weights is None or activation is None or non_torch is None \
                or activation.source not in (LOGGED, ASSUMED, CONFIG):
            return None
        graphs = self.cuda_graph_gib.value if self.graph_in_budget and self.cuda_graph_gib else 0.0
        return budget - weights.value - activation.value - non_torch.value - graphs

    def concurrency(self, blocks: int | None, tokens: int | None, length: int,
                    request_tokens: float | None = None) -> float | None:
        """Requests of `length` tokens the cache holds at once, as this engine computes it."""
        if not length or blocks is None:
            return None
        block = self.block_size.value
        if request_tokens is not None:                           # sliding-window layers hold less per request
            return blocks * block / request_tokens
        if self.engine == "v0":
            return (tokens if tokens is not None else blocks * block) / length
        return blocks / math.ceil(length / block)


# Figures the model divides by or scales with: zero or less is a mangled log, so unknown (never a division by 0).
_POSITIVE = frozenset({"gpu_total_gib", "budget_gib", "block_size", "gpu_memory_utilization", "max_model_len",
                       "kv_needed_gib", "tensor_parallel_size", "pipeline_parallel_size"})


def _fig(facts: Mapping[str, Fact], name: str) -> Figure | None:
    fact = facts.get(name)
    if fact is None or fact.value is None or (name in _POSITIVE and not fact.value > 0):
        return None
    return Figure(fact.value, DERIVED if fact.note else LOGGED, fact.note or "")


def _era(facts: Mapping[str, Fact]) -> tuple[str, str]:
    engine = facts["engine"].value if "engine" in facts else None
    version = version_tuple(facts["vllm_version"].value if "vllm_version" in facts else None)
    if engine is None:
        engine = "v0" if "gpu_blocks" in facts or (version and version < (0, 8)) else "v1"
    if engine == "v0":
        profiled = any(n in facts for n in ("activation_gib", "non_torch_gib", "kv_cache_gib"))
        return ("v0-profile" if profiled or (version and version >= (0, 6, 4)) else "v0-blocks"), engine
    in_budget = facts["cuda_graph_in_budget"].value if "cuda_graph_in_budget" in facts else \
        bool(version and version >= GRAPH_BUDGET_RELEASE)
    if in_budget:
        return "v1-graph-budget", engine
    return ("v1-usage" if "activation_gib" in facts else "v1"), engine


def settings_from_facts(facts: Mapping[str, Fact]) -> Settings:
    def v(name: str, default: Any = None) -> Any:
        return facts[name].value if name in facts and facts[name].value is not None else default
    return Settings(gpu_memory_utilization=v("gpu_memory_utilization"), max_model_len=v("max_model_len"),
                    max_num_seqs=v("max_num_seqs"), max_num_batched_tokens=v("max_num_batched_tokens"),
                    tensor_parallel_size=v("tensor_parallel_size", 1),
                    pipeline_parallel_size=v("pipeline_parallel_size", 1),
                    kv_cache_dtype=str(v("kv_cache_dtype", "auto")),
                    dtype=str(v("dtype", "auto")).removeprefix("torch."),
                    quantization=v("quantization"), enforce_eager=bool(v("enforce_eager", False)))


def calibrate(facts: Mapping[str, Fact], spec: ModelSpec | None = None, gpu_total_gib: float | None = None,
              gpu_source: str = "given") -> Geometry:
    """The geometry one startup log shows; `spec` (a config.json) and `gpu_total_gib` (said to come from
    `gpu_source`) fill what it lacks."""
    era, engine = _era(facts)
    settings = settings_from_facts(facts)
    version = version_tuple(facts["vllm_version"].value if "vllm_version" in facts else None)
    utilization = _fig(facts, "gpu_memory_utilization")
    if utilization is None:
        default = default_gpu_memory_utilization(version)
        utilization = Figure(default, ASSUMED, f"not in the log; vLLM's default {default}")
        settings = settings.replace(gpu_memory_utilization=default)
    total = _fig(facts, "gpu_total_gib")
    # As in a diagnosis (facts/user_figures.py): the total given fills the one the log does not print, never
    # replaces it.
    if total is None and gpu_total_gib:
        total = Figure(gpu_total_gib, GIVEN, gpu_source)
    if total is None and "budget_gib" in facts:
        total = Figure(facts["budget_gib"].value / utilization.value, DERIVED, "the budget / utilization")
    weights = _fig(facts, "weights_gib")
    if weights is None and spec is not None:
        weights = Figure(round(spec.weights_gib(settings.tensor_parallel_size, settings.pipeline_parallel_size,
                                                _quantization(settings, spec), dtype_bytes(settings.dtype)), 4),
                         CONFIG, spec.path)
    block = _fig(facts, "block_size") or Figure(DEFAULT_BLOCK_SIZE, ASSUMED,
                                                f"not in the log; vLLM's default {DEFAULT_BLOCK_SIZE}")
    kv, tokens = _fig(facts, "kv_cache_gib"), _fig(facts, "kv_cache_tokens")
    per_token = None
    if kv is not None and tokens is not None and tokens.value > 0 and kv.value > 0:
        per_token = Figure(kv.value * GIB / tokens.value, DERIVED, "available KV memory / KV tokens",
                           PRINTED_GIB * GIB / tokens.value)
    elif _fig(facts, "kv_needed_gib") and _fig(facts, "max_model_len"):
        per_token = Figure(facts["kv_needed_gib"].value * GIB / facts["max_model_len"].value, DERIVED,
                           "KV one max_model_len request needs / max_model_len (vLLM's error)",
                           PRINTED_GIB * GIB / facts["max_model_len"].value)
    if spec is not None:
        exact = spec.kv_bytes_per_token(settings.tensor_parallel_size, settings.pipeline_parallel_size,
                                        kv_value_bytes(settings.kv_cache_dtype, settings.dtype))
        # the config's exact figure, unless the log's own disagrees beyond its rounding (another model, a quirk)
        if per_token is None or abs(per_token.value - exact) <= max(per_token.uncertainty, 0.001 * exact):
            per_token = Figure(exact, CONFIG, "layers x KV heads per GPU x head dim x 2 x bytes")
    estimate = facts["estimated_max_model_len"].value if "estimated_max_model_len" in facts else None
    if kv is not None and per_token is not None and estimate \
            and 0 < estimate * per_token.value / GIB - kv.value <= 0.005:
        # the print rounds to 0.01 GiB; the estimate does not
        kv = Figure(estimate * per_token.value / GIB, DERIVED,
                    "vLLM's estimate of the longest length x KV bytes per token (the logged figure is rounded)")
    if tokens is None and estimate and engine == "v1" and (spec is None or not spec.has_sliding_window):
        # vLLM's estimate is the longest length whose blocks fit the available memory, counted in whole blocks
        # from the exact byte figures: the cache's own token count, where the printed GiB are rounded
        tokens = Figure(estimate, LOGGED, "vLLM's estimate of the longest length that fits")
    if kv is None and tokens is not None and per_token is not None:
        kv = Figure(tokens.value * per_token.value / GIB, DERIVED, "KV tokens x KV bytes per token")
    activation, non_torch = _fig(facts, "activation_gib"), _fig(facts, "non_torch_gib")
    graphs = _fig(facts, "cuda_graph_estimate_gib") if era == "v1-graph-budget" else None
    captured = _fig(facts, "cuda_graph_gib")
    if graphs is None and captured is not None:
        graphs = captured if era != "v1-graph-budget" else Figure(
            captured.value, ASSUMED,
            "the estimate vLLM took out of the budget is not logged; the captured size is used")
    overhead = None
    if activation is not None and non_torch is not None:
        overhead = Figure(activation.value + non_torch.value, activation.source)
    elif total is not None and weights is not None and kv is not None:
        in_budget = graphs.value if era == "v1-graph-budget" and graphs else 0.0
        overhead = Figure(total.value * utilization.value - weights.value - kv.value - in_budget, DERIVED,
                          "budget - weights - KV" + (" - CUDA graph estimate" if in_budget else ""))
        if non_torch is not None and activation is None:
            activation = Figure(overhead.value - non_torch.value, DERIVED, "budget - weights - non-torch - KV")
    concurrency = facts["max_concurrency"].value if "max_concurrency" in facts else None
    return Geometry(era=era, engine=engine, settings=settings, total_gib=total, utilization=utilization,
                    weights_gib=weights, activation_gib=activation, non_torch_gib=non_torch, overhead_gib=overhead,
                    cuda_graph_gib=graphs, kv_gib=kv, kv_tokens=tokens, bytes_per_token=per_token, block_size=block,
                    logged_concurrency=concurrency, spec=spec, limits=model_limits(facts, spec),
                    started=any(n in facts and facts[n].value is True for n in ("server_up", "kv_cache_sized")))


def model_limits(facts: Mapping[str, Fact], spec: ModelSpec | None) -> ModelLimits:
    """The heads and the longest length vLLM accepts, from the config.json, else the table of common models.
    A length the incident itself started with was accepted, whatever rope scaling its launch carried."""
    from .catalog import known_model
    model = facts["model"].value if "model" in facts else None
    known = known_model(model) if spec is None else None
    heads = native = None
    if spec is not None:
        heads = Figure(spec.attention_heads, CONFIG, spec.path) if spec.attention_heads else None
        native = Figure(spec.max_position_embeddings, CONFIG, f"max_position_embeddings of {spec.path}") \
            if spec.max_position_embeddings else None
    elif known is not None:
        heads = Figure(known.attention_heads, ASSUMED, f"{known.name}'s config (vtriage's table of common models)")
        native = Figure(known.max_position_embeddings, ASSUMED,
                        f"{known.name}'s max_position_embeddings (vtriage's table of common models)")
    accepted = facts.get("max_model_len")
    if accepted is not None and (native is None or accepted.value > native.value):
        phase = facts["failed_phase"].value if "failed_phase" in facts else None
        past_configuration = any(n in facts for n in ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "server_up",
                                                      "kv_needed_gib")) or phase not in (None, "initialization")
        if past_configuration:
            native = Figure(accepted.value, LOGGED, "the incident's own max_model_len, which vLLM accepted "
                            "(with the rope scaling its launch carried)")
    return ModelLimits(heads, native)


def _quantization(settings: Settings, spec: ModelSpec | None) -> Quantization | None:
    if settings.quantization and settings.quantization in QUANTIZATION_BYTES:
        return Quantization(settings.quantization, QUANTIZATION_BYTES[settings.quantization], settings.quantization)
    return spec.quantization if spec else None
