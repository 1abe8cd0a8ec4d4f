"""`vtriage whatif` and `vtriage check` as a user runs them: tables, JSON, verdicts, exit codes, errors."""
from __future__ import annotations

import json
import tomllib

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import CONFIGS, FIXTURES, ROOT, diagnose_files, load_spec, run_cli, served_specs

LOGS = FIXTURES / "logs"
METRICS = [str(FIXTURES / "metrics" / f"v1-qwen3-32b-lengths-{i}.prom") for i in (0, 1)]
SCHEMA = json.loads((ROOT / "docs" / "scenario.schema.json").read_text())
QWEN_L4 = str(LOGS / "v1/kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")     # no GPU total printed
A10G = str(LOGS / "v0-late/preemption_slowdown-llama31-8b-a10g-recompute-pending.log.gz")
H200 = str(LOGS / "v1/preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")
MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]


def cli_json(*args):
    result = run_cli(*args, "--format", "json")
    assert result.stderr == b"" or b"warning" in result.stderr, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return result.returncode, data


# --- whatif -------------------------------------------------------------------------------------------

def test_whatif_table_puts_the_incident_next_to_the_prediction():
    result = run_cli("whatif", QWEN_L4, "--max-model-len", "65536")
    out = result.stdout.decode()
    assert result.returncode == 0 and "incident" in out and "predicted" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("--max-model-len"))
    assert row.split()[1:] == ["131,072", "65,536"]
    assert "FITS" in out and "kv_cache_too_small" in out           # the incident column's verdict


def test_whatif_shorter_length_keeps_the_kv_cache_and_raises_concurrency():
    rc, data = cli_json("whatif", QWEN_L4, "--max-model-len", "37720")
    inc, pred = data["incident"], data["predicted"]
    assert rc == 0 and data["verdict"] == "fits"
    assert pred["kv_cache_gib"] == inc["kv_cache_gib"] and pred["kv_cache_tokens"] == inc["kv_cache_tokens"]
    assert pred["max_concurrency"] == pytest.approx(inc["kv_cache_tokens"] / 37720, rel=0.01)
    assert inc["starts"] is False and pred["starts"] is True


def test_whatif_utilization_needs_the_gpu_total_or_says_so():
    result = run_cli("whatif", QWEN_L4, "--gpu-memory-utilization", "0.95")
    assert result.returncode == 3 and b"--gpu-memory-gib" in result.stdout and b"CANNOT PREDICT" in result.stdout
    rc, data = cli_json("whatif", QWEN_L4, "--gpu-memory-utilization", "0.95", "--gpu-memory-gib", "22.05")
    assert data["geometry"]["gpu_total"]["source"] == "given"
    assert data["predicted"]["kv_cache_gib"] == pytest.approx(data["incident"]["kv_cache_gib"] + 0.05 * 22.05, abs=0.01)


def test_whatif_fp8_and_tensor_parallel_state_their_assumptions():
    rc, fp8 = cli_json("whatif", A10G, "--kv-cache-dtype", "fp8")
    assert fp8["predicted"]["kv_cache_tokens"] == pytest.approx(2 * fp8["incident"]["kv_cache_tokens"], abs=16)
    assert any("bytes per token halve" in a for a in fp8["assumptions"])
    rc, tp = cli_json("whatif", A10G, "--tensor-parallel-size", "2")
    assert tp["predicted"]["weights_gib"] == pytest.approx(tp["incident"]["weights_gib"] / 2, abs=0.01)
    assert any("splits the weights" in a for a in tp["assumptions"])
    rc, quant = cli_json("whatif", A10G, "--quantization", "awq")
    assert quant["predicted"]["weights_gib"] < quant["incident"]["weights_gib"] * 0.3
    assert any("embeddings stay 16-bit" in a for a in quant["assumptions"])
    text = run_cli("whatif", A10G, "--kv-cache-dtype", "fp8").stdout.decode()
    assert "Assumptions" in text and "halve" in text


def test_whatif_with_a_config_sizes_quantization_exactly():
    rc, log_only = cli_json("whatif", A10G, "--quantization", "fp8")
    rc, exact = cli_json("whatif", A10G, "--quantization", "fp8", "--model-config",
                         str(CONFIGS / "llama-3.1-8b-instruct.json"))
    assert log_only["predicted"]["weights_gib"] < exact["predicted"]["weights_gib"]   # embeddings stay 16-bit
    spec = load_spec("llama-3.1-8b-instruct.json")
    ratio = exact["predicted"]["weights_gib"] / exact["incident"]["weights_gib"]
    from triage.capacity.hfconfig import Quantization
    assert ratio == pytest.approx(spec.weights_gib(quantization=Quantization("fp8", 1.0, "")) / spec.weights_gib(),
                                  abs=0.002)


def _mean_request(paths):
    """Prompt + generation tokens per request between the two snapshots, straight from the exposition."""
    totals = []
    for path in paths:
        values = {s.name: s.value for f in text_string_to_metric_families(open(path).read()) for s in f.samples
                  if s.name.endswith(("_sum", "_count"))}
        totals.append(values)
    first, last = totals

    def mean(name):
        return (last[name + "_sum"] - first[name + "_sum"]) / (last[name + "_count"] - first[name + "_count"])
    return mean("vllm:request_prompt_tokens") + mean("vllm:request_generation_tokens")


def test_whatif_uses_the_observed_request_sizes_from_metrics():
    rc, data = cli_json("whatif", H200, "--max-num-seqs", "128", *[a for m in METRICS for a in ("--metrics", m)])
    lengths = data["observed_lengths"]
    assert lengths["prompt_mean"] + lengths["generation_mean"] == pytest.approx(_mean_request(METRICS), abs=0.2)
    assert lengths["window"] == "between the first and last snapshot" and lengths["requests"] == 1800
    held = data["predicted"]["kv_cache_tokens"] / (_mean_request(METRICS) // 16 * 16 + 16)
    assert lengths["requests_held_mean"] == pytest.approx(held, rel=0.01)
    assert rc == 0 and data["verdict"] == "fits"                          # 128 < ~186 held
    rc, busy = cli_json("whatif", H200, *[a for m in METRICS for a in ("--metrics", m)])
    assert rc == 1 and busy["verdict"] == "preemption_slowdown"           # the incident's 512 do not fit
    assert "512" in busy["reason"] and busy["suggestions"]


def test_whatif_without_histograms_warns_and_still_predicts():
    result = run_cli("whatif", H200, "--metrics", str(FIXTURES / "metrics" / "v1-preempting-0.prom"))
    assert result.returncode in (0, 1) and b"no vllm:request_prompt_tokens" in result.stderr
    assert result.stderr.count(b"\n") == 1


@pytest.mark.parametrize("args,needle", [
    (["whatif", "/nonexistent.log"], "no such file"),
    (["whatif", QWEN_L4, "--gpu-memory-utilization", "1.5"], "1.5"),
    (["whatif", QWEN_L4, "--gpu-memory-utilization", "nan"], "'nan' is not a number"),
    (["whatif", QWEN_L4, "--cpu-offload-gb", "nan"], "'nan' is not a number of GiB"),
    (["whatif", QWEN_L4, "--kv-cache-dtype", "int3"], "int3"),
    (["whatif", QWEN_L4, "--model-config", str(FIXTURES / "manifest.toml")], "not valid JSON"),
    (["check"], "--model-config"),
    (["check", "--model-config", str(CONFIGS / "qwen3-8b.json")], "--gpu-memory-gib"),
    (["check", "--model-config", "/nonexistent/config.json", "--gpu-memory-gib", "80"], "no such file"),
    (["check", "--model-config", str(CONFIGS), "--gpu-memory-gib", "80"], "config.json: no such file"),
    (["check", "--model-config", str(CONFIGS / "qwen3-8b.json"), "--gpu-memory-gib", "80",
      "--expect-prompt-tokens", "100"], "both"),
    (["check", "--model-config", str(CONFIGS / "qwen3-8b.json"), "--gpu-memory-gib", "80", "--vllm-version", "new"],
     "not a vLLM release like 0.10.2"),
    (["check", "--model-config", str(CONFIGS / "qwen3-8b.json"), "--gpu-memory-gib", "80", "--gpus", "2",
      "--tensor-parallel-size", "4"], "--gpus is 2"),
])
def test_input_errors_are_one_line_exit_2(args, needle):
    result = run_cli(*args)
    err = result.stderr.decode()
    assert result.returncode == 2, (result.stdout, err)
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err and result.stdout == b""


def test_bad_config_json_error_names_the_key(tmp_path):
    data = json.loads((CONFIGS / "qwen3-8b.json").read_text())
    data["model_type"] = "mamba"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    result = run_cli("check", "--model-config", str(path), "--gpu-memory-gib", "80")
    err = result.stderr.decode()
    assert result.returncode == 2 and f"{path}: model_type:" in err and "(hint: " in err and err.count("\n") == 1


# --- check ---------------------------------------------------------------------------------------------

def check(config, *args):
    return cli_json("check", "--model-config", str(CONFIGS / config), *args)


def test_check_small_model_fits_a_24_gib_gpu_at_a_modest_length():
    rc, data = check("llama-3.1-8b-instruct.json", "--gpu-memory-gib", "22.05", "--max-model-len", "8192")
    assert rc == 0 and data["verdict"] == "fits" and data["incident"] is None
    assert data["predicted"]["weights_gib"] == pytest.approx(14.96, abs=0.01)
    assert any(a.startswith("activation peak") for a in data["assumptions"])


def test_check_predicts_kv_cache_too_small_for_the_full_context():
    rc, data = check("llama-3.1-8b-instruct.json", "--gpu-memory-gib", "22.05")   # max_model_len: the model's 131072
    assert rc == 1 and data["verdict"] == "kv_cache_too_small"
    assert data["predicted"]["max_model_len"] == 131072
    longest = next(s for s in data["suggestions"] if s.startswith("--max-model-len"))
    fits = int(longest.split()[1])
    rc, again = check("llama-3.1-8b-instruct.json", "--gpu-memory-gib", "22.05", "--max-model-len", str(fits))
    assert rc == 0 and again["verdict"] == "fits"


def test_check_predicts_weights_dont_fit_and_the_tensor_parallel_size_that_does():
    rc, data = check("llama-3.1-70b-instruct.json", "--gpu-memory-gib", "79.19", "--max-model-len", "32768")
    assert rc == 1 and data["verdict"] == "weights_dont_fit"
    assert "--tensor-parallel-size 4 fits" in data["suggestions"]       # at 2 the weights fit, 32768 tokens not
    rc, four = check("llama-3.1-70b-instruct.json", "--gpu-memory-gib", "79.19", "--max-model-len", "32768",
                     "--tensor-parallel-size", "4", "--gpus", "4")
    assert rc == 0 and four["predicted"]["weights_gib"] == pytest.approx(data["predicted"]["weights_gib"] / 4, abs=0.01)
    rc, two = check("llama-3.1-70b-instruct.json", "--gpu-memory-gib", "79.19", "--max-model-len", "32768",
                    "--tensor-parallel-size", "2", "--gpus", "2")
    assert two["verdict"] == "kv_cache_too_small" and not any("tensor" in s for s in two["suggestions"])
    rc, mixtral = check("mixtral-8x7b-instruct-v0.1.json", "--gpu-memory-gib", "79.25", "--gpus", "1")
    assert mixtral["verdict"] == "weights_dont_fit" and not any("tensor" in s for s in mixtral["suggestions"])


def test_check_predicts_a_preemption_risk_at_the_expected_length():
    args = ("--gpu-memory-gib", "79.19", "--max-model-len", "32768", "--expect-prompt-tokens", "3000",
            "--expect-output-tokens", "1000")
    rc, busy = check("qwen3-8b.json", *args, "--max-num-seqs", "512")
    assert rc == 1 and busy["verdict"] == "preemption_slowdown"
    held = busy["observed_lengths"]["requests_held_mean"]
    assert held < 512
    rc, calm = check("qwen3-8b.json", *args, "--max-num-seqs", str(int(held) - 1))
    assert rc == 0 and calm["verdict"] == "fits"


def test_check_sliding_window_and_latent_attention():
    args = ("--gpu-memory-gib", "22.05", "--max-model-len", "32768")
    rc, sliding = check("mistral-7b-instruct-v0.1.json", *args)
    rc, full = check("mistral-7b-instruct-v0.1.json", *args, "--disable-sliding-window")
    assert sliding["predicted"]["kv_cache_tokens"] == full["predicted"]["kv_cache_tokens"]
    assert sliding["predicted"]["max_concurrency"] > 4 * full["predicted"]["max_concurrency"]
    rc, mla1 = check("deepseek-v2-lite-chat.json", "--gpu-memory-gib", "79.19", "--max-model-len", "32768")
    rc, mla2 = check("deepseek-v2-lite-chat.json", "--gpu-memory-gib", "79.19", "--max-model-len", "32768",
                     "--tensor-parallel-size", "2")
    assert mla1["verdict"] == "fits"
    assert mla1["geometry"]["kv_bytes_per_token"]["value"] == mla2["geometry"]["kv_bytes_per_token"]["value"] == 31104


def test_check_from_a_log_agrees_with_whatif():
    rc1, from_log = cli_json("check", "--from-log", A10G, "--max-model-len", "8192")
    rc2, what = cli_json("whatif", A10G, "--max-model-len", "8192")
    assert from_log["kind"] == "check" and rc1 == rc2 == 0
    assert from_log["predicted"] == what["predicted"]


def test_check_against_the_fixtures_serving_the_same_model(kit):
    """A config-only check on the fixture's own GPU and flags predicts the KV memory vLLM logged (10 %, the
    activation peak being an estimate) and the same bytes per token."""
    from triage.capacity.model import settings_from_facts
    from triage.capacity.predict import predict
    from triage.capacity.scenario import config_geometry
    specs = served_specs()
    checked = 0
    for entry in MANIFEST:
        facts = diagnose_files(kit, LOGS / entry["file"]).diagnosis.facts
        needed = {"model", "gpu_total_gib", "kv_cache_gib", "weights_gib", "vllm_version"}
        if not needed <= set(facts) or facts["model"].value not in specs:
            continue
        g = config_geometry(specs[facts["model"].value], facts["gpu_total_gib"].value, settings_from_facts(facts),
                            facts["vllm_version"].value)
        p = predict(g)
        logged = facts["kv_cache_gib"].value
        assert abs(p.kv_gib - logged) <= max(0.1 * abs(logged), 1.0), entry["file"]
        checked += 1
    assert checked >= 8


def test_a_log_without_startup_figures_cannot_be_predicted_exit_3():
    """The help says 3 when the log lacks the figures to predict; it is not a usage error."""
    result = run_cli("whatif", str(LOGS / "v0-late/other_failure-llama32-3b-gated-repo-401.log"))
    err = result.stderr.decode()
    assert result.returncode == 3 and "no startup memory figures" in err and err.count("\n") == 1
    assert result.stdout == b""
