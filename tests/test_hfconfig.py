"""config.json -> parameters, weights and KV bytes per token, held against model cards and the fixture logs."""
from __future__ import annotations

import json
import tomllib

import pytest

from triage.capacity.hfconfig import spec_from_config, spec_from_json
from triage.capacity.model import GIB, settings_from_facts
from triage.errors import InputError

from conftest import CONFIGS, FIXTURES, config_entries, diagnose_files, load_spec, served_specs

MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]


@pytest.mark.parametrize("entry", config_entries(), ids=lambda e: e["file"])
def test_parameter_count_matches_the_model_card(entry):
    spec = load_spec(entry["file"])
    assert spec.total_params / 1e9 == pytest.approx(entry["published_params_b"], rel=0.01)


def _served_fixtures(kit):
    specs = served_specs()
    for entry in MANIFEST:
        facts = diagnose_files(kit, FIXTURES / "logs" / entry["file"]).diagnosis.facts
        if "model" in facts and facts["model"].value in specs:
            yield entry["file"], facts, specs[facts["model"].value]


def test_weights_from_config_match_what_vllm_loaded(kit):
    """'Model loading took X GiB' on the fixture logs of the same model, same TP and quantization: within 3 %."""
    checked = 0
    for name, facts, spec in _served_fixtures(kit):
        if "weights_gib" not in facts:
            continue
        s = settings_from_facts(facts)                    # the checkpoint's own quantization is in its config
        predicted = spec.weights_gib(s.tensor_parallel_size, s.pipeline_parallel_size)
        assert predicted == pytest.approx(facts["weights_gib"].value, rel=0.03), name
        checked += 1
    assert checked >= 15


def test_kv_bytes_per_token_from_config_match_the_logs(kit):
    """Available KV memory / KV tokens as vLLM printed them, per GPU (TP and KV dtype applied): within 1 %."""
    checked = 0
    for name, facts, spec in _served_fixtures(kit):
        if not {"kv_cache_gib", "kv_cache_tokens"} <= set(facts) or facts["kv_cache_tokens"].value == 0:
            continue
        s = settings_from_facts(facts)
        logged = facts["kv_cache_gib"].value * GIB / facts["kv_cache_tokens"].value
        kv_bytes = 1.0 if s.kv_cache_dtype.startswith("fp8") else 2.0
        assert spec.kv_bytes_per_token(s.tensor_parallel_size, s.pipeline_parallel_size, kv_bytes) == \
            pytest.approx(logged, rel=0.01), name
        checked += 1
    assert checked >= 10


def test_latent_attention_caches_one_latent_per_token_on_every_gpu():
    spec = load_spec("deepseek-v2-lite-chat.json")
    assert spec.uses_latent_attention and spec.experts == (64, 6)
    assert spec.kv_bytes_per_token(1) == 27 * (512 + 64) * 2          # layers x (kv_lora_rank + rope dim) x bf16
    assert spec.kv_bytes_per_token(4) == spec.kv_bytes_per_token(1)   # not split by tensor parallelism
    assert spec.weights_gib(4) == pytest.approx(spec.weights_gib(1) / 4)


def test_mixture_of_experts_keeps_every_expert_in_memory():
    mixtral = load_spec("mixtral-8x7b-instruct-v0.1.json")
    dense = load_spec("mistral-7b-instruct-v0.1.json")                # the same layers with one MLP
    assert mixtral.experts == (8, 2)
    mlp = 3 * 4096 * 14336 * 32
    assert mixtral.total_params - dense.total_params == pytest.approx(7 * mlp, rel=0.001)
    assert mixtral.weights_gib(2) == pytest.approx(mixtral.weights_gib() / 2)
    assert mixtral.intermediate_size == 2 * 14336                     # two experts per token pass the activations


def test_sliding_window_layers_hold_only_their_window():
    v01 = load_spec("mistral-7b-instruct-v0.1.json")
    full = v01.request_kv_bytes(32768, sliding=False)
    assert full == 32768 * v01.kv_bytes_per_token()
    assert v01.request_kv_bytes(32768, batched_tokens=2048) == pytest.approx((4096 - 1 + 2048 + 16) // 16 * 16
                                                                             * v01.kv_bytes_per_token(), rel=0.01)
    gemma2 = load_spec("gemma-2-9b-it.json")
    assert [a.kind for a in gemma2.attention[:4]] == ["sliding", "full", "sliding", "full"]
    gemma3 = load_spec("gemma-3-12b-it.json")
    assert sum(a.kind == "full" for a in gemma3.attention) == 8 and gemma3.encoder_params > 0.3e9
    v03 = load_spec("mistral-7b-instruct-v0.3.json")
    assert not v03.has_sliding_window and not load_spec("qwen2.5-7b-instruct.json").has_sliding_window


def test_int4_checkpoint_counts_scales_and_keeps_embeddings_16_bit():
    awq = load_spec("qwen2.5-32b-instruct-awq.json")
    assert awq.quantization.method == "awq"
    assert 0.5 < awq.quantization.bytes_per_param < 0.53
    full_16_bit = awq.total_params * 2 / GIB
    assert full_16_bit / 4 < awq.weights_gib() < full_16_bit / 3      # embeddings stay 16-bit


BASE = json.loads((CONFIGS / "llama-3.1-8b-instruct.json").read_text())


@pytest.mark.parametrize("change,where,needle", [
    ({"model_type": "gpt2"}, "model_type", "unknown architecture 'gpt2'"),
    ({"model_type": "jamba"}, "model_type", "state-space"),
    ({"num_hidden_layers": None}, "num_hidden_layers", "missing"),
    ({"num_key_value_heads": "8"}, "num_key_value_heads", "must be an integer"),
    ({"num_key_value_heads": 5}, "num_key_value_heads", "does not divide"),
    ({"sliding_window": -1}, "sliding_window", "positive integer"),
    ({"layer_types": ["full_attention"] * 3}, "layer_types", "one type per layer"),
    ({"quantization_config": {"quant_method": "hqq"}}, "quantization_config.quant_method", "'hqq'"),
])
def test_what_the_model_does_not_size_is_refused_naming_the_key(change, where, needle):
    data = {**BASE, **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(InputError) as err:
        spec_from_config(data, "config.json")
    message = str(err.value)
    assert message.startswith(f"config.json: {where}:") and needle in message and "(hint: " in message


def test_bad_json_names_line_and_column():
    with pytest.raises(InputError) as err:
        spec_from_json('{\n  "hidden_size": 4096,\n  "vocab_size": 12\n  "x": 1\n}', "cfg.json")
    assert str(err.value).startswith("cfg.json:4:3: not valid JSON")
