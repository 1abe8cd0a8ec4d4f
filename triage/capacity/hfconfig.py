"""A model's memory geometry from its local Hugging Face config.json: parameters and KV bytes per token.

Parameters are counted from the architecture (embeddings, attention with grouped-query heads or DeepSeek's
latent attention, gated MLP or mixture-of-experts, norms, an untied lm_head), so the weight size follows
from the dtype or quantization. KV bytes per token are layers x KV heads x head dim x 2 x dtype bytes, per
layer, so sliding-window layers (Mistral v0.1, Gemma-2/3's interleaved local layers) can hold only their
window. Anything this does not model (state-space layers, unknown architectures) is refused with the key
that says so: a guess here would be a wrong verdict before a rollout.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import InputError
from ..redact import Redactor

GIB = 1 << 30
HINT_FROM_LOG = "or calibrate from a startup log of the same model: vtriage check --from-log LOG"

# model_type -> whether lm_head is tied to the embeddings when config.json does not say (transformers' defaults)
DECODERS: Mapping[str, bool] = {
    "llama": False, "mistral": False, "mixtral": False, "qwen2": False, "qwen2_moe": False, "qwen3": False,
    "qwen3_moe": False, "gemma": True, "gemma2": True, "gemma3": True, "gemma3_text": True, "phi3": False,
    "deepseek_v2": False, "deepseek_v3": False, "granite": True, "olmo2": False, "internlm2": False,
    "ministral": False, "cohere": True, "starcoder2": True, "exaone": False,
}
STATE_SPACE = frozenset({"mamba", "mamba2", "jamba", "falcon_h1", "bamba", "zamba", "zamba2", "nemotron_h",
                         "granitemoehybrid", "qwen3_next", "plamo2", "lfm2", "minimax", "minimax_text_01"})
NORMS_PER_LAYER = {"gemma2": 4, "gemma3": 4, "gemma3_text": 4}
QK_NORM = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2"})
QKV_BIAS = frozenset({"qwen2", "qwen2_moe"})

# The largest value each key may have. Far above any released model, these bound what an absurd or hostile
# config.json can cost: a layer count of 10^8 built a list of 10^8 layers (a minute and 2 GB), 10^400
# overflowed a float. Keys not listed may be up to DEFAULT_MAXIMUM.
MAXIMUM: Mapping[str, int] = {
    "num_hidden_layers": 10_000, "num_attention_heads": 100_000, "num_key_value_heads": 100_000,
    "hidden_size": 10**6, "head_dim": 10**6, "intermediate_size": 10**7, "moe_intermediate_size": 10**7,
    "shared_expert_intermediate_size": 10**7, "vocab_size": 10**8, "max_position_embeddings": 10**9,
    "sliding_window": 10**9, "sliding_window_pattern": 10_000, "num_local_experts": 100_000,
    "num_experts": 100_000, "n_routed_experts": 100_000, "num_experts_per_tok": 100_000,
    "n_shared_experts": 100_000, "first_k_dense_replace": 10_000, "decoder_sparse_step": 10_000,
    "kv_lora_rank": 10**6, "q_lora_rank": 10**6, "qk_rope_head_dim": 10**6, "qk_nope_head_dim": 10**6,
    "v_head_dim": 10**6, "patch_size": 10_000,
}
DEFAULT_MAXIMUM = 10**9
MAX_ROPE_FACTOR = 10_000.0
QUANT_BITS = (2, 3, 4, 8)
MAX_GROUP_SIZE = 10**6
_LONG_NUMBER = re.compile(r'(?:"(?P<key>[^"\n]{0,200})"\s*:\s*)?-?(?P<digits>\d{4300,})')


def shown(value: Any) -> str:
    """A value as an error shows it: JSON, clipped so a long one cannot flood the terminal, and redacted: a
    token pasted into the wrong key is still a token."""
    text = json.dumps(value)
    length = len(text)
    if isinstance(value, (str, list, dict)):
        text = Redactor().text(text[:4000])          # redacted whole, before the cut could hide a token's shape
    return text if len(text) <= 40 else f"{text[:40]}... ({length:,} characters)"


def out_of_range(where: str, value: Any, low: float, high: float) -> InputError:
    return InputError(where, f"{shown(value)} is out of range ({low:g} to {high:g})",
                      "no released model comes near it: fix the value in config.json")


@dataclass(frozen=True)
class AttentionLayer:
    """One attention layer's KV cache: `width` values per token per KV head (K and V: x2 unless latent)."""

    kind: str                    # full | sliding | latent
    kv_heads: int
    head_dim: int
    window: int | None = None

    def bytes_per_token(self, tp: int, dtype_bytes: float) -> float:
        if self.kind == "latent":                     # one compressed latent + rope key, the same on every GPU
            return self.head_dim * dtype_bytes
        return 2 * max(1, self.kv_heads // tp) * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class Quantization:
    method: str
    bytes_per_param: float       # for the quantized linear weights, scales included
    note: str


@dataclass(frozen=True)
class ModelSpec:
    """What the memory model needs from config.json."""

    path: str
    model_type: str
    hidden_size: int
    intermediate_size: int       # per token through the MLP: dense width, or active experts x expert width
    vocab_size: int
    num_layers: int
    embedding_params: int
    lm_head_params: int          # 0 when tied to the embeddings
    linear_params: int           # decoder weights a quantization method shrinks
    other_params: int            # norms, biases, routers: kept in the model dtype
    encoder_params: int          # a vision tower, kept in the model dtype
    attention: tuple[AttentionLayer, ...]
    torch_dtype: str
    quantization: Quantization | None
    max_position_embeddings: int | None
    experts: tuple[int, int] | None   # (experts, active per token)
    notes: tuple[str, ...]
    attention_heads: int = 0     # query heads: vLLM refuses a tensor-parallel size that does not divide them

    @property
    def total_params(self) -> int:
        return (self.embedding_params + self.lm_head_params + self.linear_params + self.other_params
                + self.encoder_params)

    def weights_gib(self, tp: int = 1, pp: int = 1, quantization: Quantization | None = None,
                    dtype_bytes: float = 2.0) -> float:
        """Weights on the fullest GPU: everything split over TP; layers split over PP stages, the first
        stage also holding the embeddings (the last the lm_head)."""
        quant = quantization or self.quantization
        linear = self.linear_params * (quant.bytes_per_param if quant else dtype_bytes)
        rest = (self.other_params + self.encoder_params) * dtype_bytes
        ends = (self.embedding_params + self.lm_head_params) * dtype_bytes
        if pp > 1:
            share = math.ceil(self.num_layers / pp) / self.num_layers
            ends = max(self.embedding_params, self.lm_head_params or self.embedding_params) * dtype_bytes
            linear, rest = linear * share, rest * share + self.encoder_params * dtype_bytes * (1 - share)
        return (linear + rest + ends) / tp / GIB

    def _stage_layers(self, pp: int) -> tuple[AttentionLayer, ...]:
        return self.attention[:math.ceil(len(self.attention) / pp)] if pp > 1 else self.attention

    def kv_bytes_per_token(self, tp: int = 1, pp: int = 1, dtype_bytes: float = 2.0) -> float:
        """As vLLM counts its KV tokens: every layer on the GPU stores every token it holds a block for."""
        return sum(layer.bytes_per_token(tp, dtype_bytes) for layer in self._stage_layers(pp))

    def request_kv_bytes(self, tokens: int, tp: int = 1, pp: int = 1, dtype_bytes: float = 2.0,
                         block_size: int = 16, batched_tokens: int = 2048, sliding: bool = True) -> float:
        """KV one request of `tokens` needs on one GPU: a sliding-window layer keeps only its window
        (plus one scheduler step and a block, as vLLM V1's hybrid KV cache manager allocates)."""
        total = 0.0
        for layer in self._stage_layers(pp):
            held = tokens
            if sliding and layer.kind == "sliding" and layer.window:
                held = min(tokens, layer.window - 1 + batched_tokens) + block_size
            total += math.ceil(min(held, tokens + block_size) / block_size) * block_size \
                * layer.bytes_per_token(tp, dtype_bytes)
        return total

    @property
    def has_sliding_window(self) -> bool:
        return any(layer.kind == "sliding" for layer in self.attention)

    @property
    def uses_latent_attention(self) -> bool:
        return any(layer.kind == "latent" for layer in self.attention)


# --- reading config.json -------------------------------------------------------------------------------

def spec_from_json(text: str, path: str) -> ModelSpec:
    """Parse and understand a config.json's text; every problem is an InputError naming the line or key."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}", f"not valid JSON ({exc.msg})",
                         "give the model's config.json as downloaded") from None
    except RecursionError:
        raise InputError(path, "nested too deeply to be a model config",
                         "give the model's config.json as downloaded") from None
    except ValueError:        # an integer longer than Python reads from text (4,300 digits)
        raise _long_number(text, path) from None
    if not isinstance(data, dict):
        raise InputError(path, "not a JSON object", "a Hugging Face config.json is one {...} object")
    return spec_from_config(data, path)


def _long_number(text: str, path: str) -> InputError:
    m = _LONG_NUMBER.search(text)
    if m is None:
        return InputError(path, "holds a value Python cannot read", "give the model's config.json as downloaded")
    line = text.count("\n", 0, m.start()) + 1
    key = f": {m['key'][:60]}" if m["key"] is not None else ""
    return InputError(f"{path}:{line}{key}", f"a number of {len(m['digits']):,} digits",
                      "no released model comes near it: fix the value in config.json")


class _Reader:
    """Typed access to config keys, with errors that name the key."""

    def __init__(self, data: Mapping[str, Any], path: str, prefix: str = "") -> None:
        self.data, self.path, self.prefix = data, path, prefix

    def where(self, key: str) -> str:
        return f"{self.path}: {self.prefix}{key}"

    def optional_int(self, key: str, minimum: int = 1) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InputError(self.where(key), f"must be an integer >= {minimum}, got {shown(value)}",
                             "fix the value in config.json")
        if value > MAXIMUM.get(key, DEFAULT_MAXIMUM):
            raise out_of_range(self.where(key), value, minimum, MAXIMUM.get(key, DEFAULT_MAXIMUM))
        return value

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        """The key's value, else `default`; missing with no default is an error."""
        value = self.optional_int(key, minimum)
        if value is not None:
            return value
        if default is not None:
            return default
        raise InputError(self.where(key), "missing", "a decoder config needs it to size the model; "
                         + HINT_FROM_LOG)

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value


def spec_from_config(data: Mapping[str, Any], path: str = "config.json") -> ModelSpec:
    outer = _Reader(data, path)
    model_type = str(data.get("model_type") or "")
    notes: list[str] = []
    encoder = 0
    text = data
    prefix = ""
    if isinstance(data.get("text_config"), dict):           # multimodal: the language model is nested
        text, prefix = data["text_config"], "text_config."
        encoder = _vision_params(data.get("vision_config"), _Reader(data.get("vision_config") or {}, path,
                                                                     "vision_config."), notes)
        model_type = str(text.get("model_type") or model_type)
    r = _Reader(text, path, prefix)
    if not model_type:
        raise InputError(outer.where("model_type"), "missing", "a Hugging Face config.json names its model_type")
    if model_type in STATE_SPACE or any(k in text for k in ("layers_block_type", "mamba_d_state", "ssm_state_size")):
        raise InputError(outer.where("model_type"), f"'{model_type}' has state-space (Mamba-style) layers, whose "
                         "cache is not a per-token KV cache; this model does not size it", HINT_FROM_LOG)
    if model_type not in DECODERS:
        raise InputError(outer.where("model_type"), f"unknown architecture '{model_type}'",
                         "supported: " + ", ".join(sorted(DECODERS)) + "; " + HINT_FROM_LOG)
    hidden = r.int("hidden_size")
    layers = r.int("num_hidden_layers")
    heads = r.int("num_attention_heads")
    vocab = r.int("vocab_size")
    kv_heads = r.int("num_key_value_heads", default=heads)
    head_dim = r.int("head_dim", default=hidden // heads)
    if heads % kv_heads:
        raise InputError(r.where("num_key_value_heads"), f"{kv_heads} does not divide num_attention_heads {heads}",
                         "grouped-query attention shares each KV head among a whole number of query heads")
    tied = text.get("tie_word_embeddings", data.get("tie_word_embeddings", DECODERS[model_type]))
    latent = text.get("kv_lora_rank") is not None
    if latent:
        attention_params, attention = _latent_attention(r, hidden, heads, layers)
        notes.append("latent attention (MLA): one compressed KV latent per token, the same on every "
                     "tensor-parallel GPU")
    else:
        attention_params = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
        if text.get("attention_bias") or model_type in QKV_BIAS:
            attention_params += heads * head_dim + 2 * kv_heads * head_dim
        attention = _attention_layers(r, model_type, layers, kv_heads, head_dim, notes)
    mlp_linear, mlp_other, width, experts = _mlp(r, model_type, hidden, layers, notes)
    norms = layers * hidden * NORMS_PER_LAYER.get(model_type, 2) + hidden
    if model_type in QK_NORM:
        norms += layers * 2 * head_dim
    bias = (heads * head_dim + 2 * kv_heads * head_dim) * layers \
        if text.get("attention_bias") or model_type in QKV_BIAS else 0
    linear = attention_params * layers - bias + mlp_linear
    embedding = vocab * hidden
    quant = quantization_from_config(data.get("quantization_config") or text.get("quantization_config"), path)
    dtype = str(text.get("torch_dtype") or data.get("torch_dtype") or text.get("dtype")
                or data.get("dtype") or "bfloat16")
    max_pos = r.optional_int("max_position_embeddings")
    scaling = text.get("rope_scaling") or {}
    if isinstance(scaling, dict) and max_pos:
        kind = scaling.get("rope_type") or scaling.get("type")
        factor = scaling.get("factor")
        original = scaling.get("original_max_position_embeddings")
        # compared, not converted: an integer too large for a float is out of range, not an OverflowError;
        # NaN fails both comparisons
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) \
                and not 0 < factor <= MAX_ROPE_FACTOR:
            raise out_of_range(r.where("rope_scaling.factor"), factor, 0, MAX_ROPE_FACTOR)
        if isinstance(original, int) and not isinstance(original, bool) \
                and not 1 <= original <= MAXIMUM["max_position_embeddings"]:
            raise out_of_range(r.where("rope_scaling.original_max_position_embeddings"), original, 1,
                               MAXIMUM["max_position_embeddings"])
        if kind == "yarn" and isinstance(factor, (int, float)) and factor > 1 and isinstance(original, int):
            max_pos = max(max_pos, int(original * factor))     # how vLLM derives the longest length
            notes.append(f"rope scaling {kind} x{factor:g}: up to {max_pos} tokens")
    return ModelSpec(path=path, model_type=model_type, hidden_size=hidden, intermediate_size=width, vocab_size=vocab,
                     num_layers=layers, embedding_params=embedding, lm_head_params=0 if tied else embedding,
                     linear_params=linear, other_params=norms + mlp_other + bias, encoder_params=encoder,
                     attention=attention, torch_dtype=dtype, quantization=quant, max_position_embeddings=max_pos,
                     experts=experts, notes=tuple(notes), attention_heads=heads or 0)


def _latent_attention(r: _Reader, hidden: int, heads: int, layers: int) -> tuple[int, tuple[AttentionLayer, ...]]:
    """DeepSeek-V2/V3 multi-head latent attention: the cache holds kv_lora_rank + qk_rope_head_dim per token."""
    kv_rank = r.int("kv_lora_rank")
    rope = r.int("qk_rope_head_dim")
    nope = r.int("qk_nope_head_dim")
    v_dim = r.int("v_head_dim")
    q_rank = r.optional_int("q_lora_rank")
    q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
    params = q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    params += kv_rank + (q_rank or 0)                     # the two latent norms
    return params, tuple(AttentionLayer("latent", 1, kv_rank + rope) for _ in range(layers))


def _attention_layers(r: _Reader, model_type: str, layers: int, kv_heads: int, head_dim: int,
                      notes: list[str]) -> tuple[AttentionLayer, ...]:
    """Which layers slide: `layer_types`, Gemma-3's `sliding_window_pattern`, Gemma-2's every other layer,
    else all of them when `sliding_window` is set (Mistral v0.1) and not switched off (Qwen2's use_sliding_window)."""
    window = r.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise InputError(r.where("sliding_window"), f"must be a positive integer or null, got {json.dumps(window)}",
                         "fix the value in config.json")
    if r.get("use_sliding_window") is False:
        window = None
    kinds: list[str]
    types = r.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise InputError(r.where("layer_types"), f"must list one type per layer ({layers})",
                             "fix the value in config.json")
        unknown = sorted({t for t in types if t not in ("full_attention", "sliding_attention")})
        if unknown:
            raise InputError(r.where("layer_types"), f"unknown layer type {unknown[0]!r}",
                             "this model sizes full_attention and sliding_attention layers; " + HINT_FROM_LOG)
        kinds = ["sliding" if t == "sliding_attention" else "full" for t in types]
    elif window and model_type in ("gemma3", "gemma3_text"):
        pattern = r.int("sliding_window_pattern", default=6)
        kinds = ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]
    elif window and model_type == "gemma2":
        kinds = ["sliding" if i % 2 == 0 else "full" for i in range(layers)]
    else:
        kinds = ["sliding" if window else "full"] * layers
    if "sliding" in kinds:
        local = kinds.count("sliding")
        notes.append(f"{local} of {layers} layers use a {window}-token sliding window")
    return tuple(AttentionLayer(k, kv_heads, head_dim, window if k == "sliding" else None) for k in kinds)


def _mlp(r: _Reader, model_type: str, hidden: int, layers: int,
         notes: list[str]) -> tuple[int, int, int, tuple[int, int] | None]:
    """(linear params, router params, the MLP width one token passes through, (experts, active) or None)."""
    experts = r.optional_int("num_local_experts") or r.optional_int("num_experts") \
        or r.optional_int("n_routed_experts")
    if not experts:
        width = r.int("intermediate_size")
        return 3 * hidden * width * layers, 0, width, None
    dense_width = r.optional_int("intermediate_size")
    active = r.int("num_experts_per_tok")
    expert_width = r.int("moe_intermediate_size", default=dense_width)
    dense_layers = set(range(r.int("first_k_dense_replace", default=0, minimum=0)))
    step = r.int("decoder_sparse_step", default=1)
    only_dense = r.get("mlp_only_layers", [])
    if not isinstance(only_dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only_dense):
        raise InputError(r.where("mlp_only_layers"), f"must be a list of layer numbers, got {shown(only_dense)}",
                         "fix the value in config.json")
    only_dense = set(only_dense)
    dense_layers |= {i for i in range(layers) if (i + 1) % step != 0 or i in only_dense}
    shared = 3 * hidden * (r.int("n_shared_experts", default=0, minimum=0) * expert_width
                           + r.int("shared_expert_intermediate_size", default=0, minimum=0))
    moe_layers = layers - len(dense_layers)
    linear = moe_layers * (experts * 3 * hidden * expert_width + shared) \
        + len(dense_layers) * 3 * hidden * (dense_width or 0)
    router = moe_layers * (hidden * experts + (hidden if r.get("shared_expert_intermediate_size") else 0))
    notes.append(f"mixture of experts: {experts} experts, {active} active per token; all of them are in memory")
    return linear, router, active * expert_width + shared // (3 * hidden), (experts, active)


def _vision_params(vision: Any, r: _Reader, notes: list[str]) -> int:
    """A ViT-style encoder: layers x (attention 4h^2 + MLP 2h x inner) plus the patch embedding."""
    if not isinstance(vision, dict):
        return 0
    h, inner, depth = r.int("hidden_size"), r.int("intermediate_size"), r.int("num_hidden_layers")
    patch = r.int("patch_size", default=14)
    params = depth * (4 * h * h + 2 * h * inner) + 3 * patch * patch * h
    notes.append(f"vision encoder of about {params / 1e9:.2f}B parameters counted in the model dtype")
    return params


def quantization_from_config(qc: Any, path: str) -> Quantization | None:
    """The bytes per quantized weight a checkpoint's quantization_config implies, scales included."""
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise InputError(f"{path}: quantization_config", "must be an object", "fix the value in config.json")
    method = str(qc.get("quant_method") or "").lower()
    if method in ("fp8", "fbgemm_fp8", "modelopt"):
        return Quantization(method, 1.0, "FP8 weights: 1 byte per parameter")
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "bitsandbytes"):
        bits_key = "bits" if qc.get("bits") is not None else "w_bit"
        bits = qc.get(bits_key) or (4 if qc.get("load_in_4bit") or method == "bitsandbytes" else None)
        group_key = "group_size" if qc.get("group_size") is not None else "q_group_size"
        group = qc.get(group_key) or 128
        return int_quantization(method, _bits(bits or 4, f"{path}: quantization_config.{bits_key}"),
                                _group(group, f"{path}: quantization_config.{group_key}"))
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, dict) and g.get("weights")), None)
        if isinstance(weights, dict) and weights.get("num_bits") in (4, 8):
            if weights["num_bits"] == 8:
                return Quantization(method, 1.0, "compressed-tensors 8-bit weights: 1 byte per parameter")
            group_where = f"{path}: quantization_config.config_groups.weights.group_size"
            return int_quantization(method, 4, _group(weights.get("group_size") or 128, group_where))
    if method == "mxfp4":
        return Quantization(method, 4.25 / 8, "MXFP4: 4 bits per parameter plus one 8-bit scale per 32")
    raise InputError(f"{path}: quantization_config.quant_method",
                     f"'{method or '?'}' is not a quantization this model sizes",
                     "known: fp8, awq, gptq, bitsandbytes, compressed-tensors (4/8-bit), mxfp4; " + HINT_FROM_LOG)


def _bits(value: Any, where: str) -> int:
    if value not in QUANT_BITS or isinstance(value, bool):
        raise InputError(where, f"must be one of {', '.join(map(str, QUANT_BITS))} (bits per weight), "
                                f"got {shown(value)}", "fix the value in config.json")
    return int(value)


def _group(value: Any, where: str) -> int:
    """A quantization group size; -1 (one group per row, as GPTQ writes it) is sized as the default 128."""
    if value == -1 and not isinstance(value, bool):
        return 128
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(where, f"must be an integer, got {shown(value)}", "fix the value in config.json")
    if not 1 <= value <= MAX_GROUP_SIZE:
        raise out_of_range(where, value, 1, MAX_GROUP_SIZE)
    return value


def int_quantization(method: str, bits: int, group: int = 128) -> Quantization:
    """Packed integer weights plus a 16-bit scale and a packed zero point per group."""
    per_param = bits / 8 + (2 + bits / 8) / group
    return Quantization(method, per_param, f"{bits}-bit weights with a 16-bit scale per {group}: "
                                           f"{per_param:.3f} bytes per parameter")
