"""Figures from outside (a Prometheus answer, a model's config.json, .vtriage.toml) are checked before they
are used: a wrong shape or an absurd number is one line naming where, the key, the value and a hint,
exit 2, never a traceback, an overflow or a run that eats the machine."""
from __future__ import annotations

import http.server
import json
import threading

import pytest

from conftest import FIXTURES, run_cli

KV = str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")


def _one_line_error(result) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b"", (result.returncode, err)
    assert err.startswith("vtriage: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "(hint: " in err, err
    return err


# --- a Prometheus answer ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prometheus():
    """A server that answers every query_range with the body the test put in `answer`."""
    answer = {"body": b"{}"}

    class Fake(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"])

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answer
    finally:
        httpd.shutdown()
        httpd.server_close()


def _matrix(result) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


SERIES = {"__name__": "vllm:num_requests_running", "pod": "p"}


@pytest.mark.parametrize("body,needle", [
    (_matrix({"a": 1}), "data.result is an object, not a list"),
    ([1, 2], "the answer is a list, not an object"),
    ({"status": 1}, "status is a number, not a string"),
    ({"status": "success"}, "data is missing"),
    ({"status": "success", "data": [1]}, "data is a list, not an object"),
    ({"status": "success", "data": {"resultType": "matrix"}}, "data.result is missing"),
    (_matrix([1]), "data.result[0] is a number, not an object"),
    (_matrix([{"metric": [1], "values": []}]), "data.result[0].metric is a list, not an object"),
    (_matrix([{"metric": {"__name__": 5}, "values": []}]), "data.result[0].metric.__name__ is a number, not a string"),
    (_matrix([{"metric": SERIES}]), "data.result[0].values is missing"),
    (_matrix([{"metric": SERIES, "values": 5}]), "data.result[0].values is a number, not a list"),
    (_matrix([{"metric": SERIES, "values": [[1]]}]), "data.result[0].values[0] is not a [time, \"value\"] pair"),
    (_matrix([{"metric": SERIES, "values": [[1, [2]]]}]), "data.result[0].values[0] is not a [time, \"value\"] pair"),
    (_matrix([{"metric": SERIES, "values": [["x", "1"]]}]), "data.result[0].values[0] is not a [time, \"value\"]"),
    ({**_matrix([{"metric": SERIES, "values": [[1, "1"]]}]), "warnings": 5}, "warnings is a number, not a list"),
])
def test_a_prometheus_answer_of_the_wrong_shape_is_one_line(prometheus, body, needle):
    url, answer = prometheus
    answer["body"] = json.dumps(body).encode()
    err = _one_line_error(run_cli("--prometheus", url, "--since", "5m"))
    assert f"{url}/api/v1/query_range" in err and needle in err, err


# --- a model's config.json -------------------------------------------------------------------------------

LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336,
         "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


def _check(tmp_path, text: str):
    config = tmp_path / "config.json"
    config.write_text(text)
    return run_cli("check", "--model-config", str(config), "--gpu-memory-gib", "80", "--max-model-len", "4096"), config


def test_a_sane_config_is_read(tmp_path):
    result, _ = _check(tmp_path, json.dumps(LLAMA))
    assert result.returncode in (0, 1), result.stderr.decode()


@pytest.mark.parametrize("key,raw,needle", [
    ("num_hidden_layers", "1" + "0" * 400, "num_hidden_layers: 1000000000"),                  # 10^400: OverflowError
    ("num_hidden_layers", "100000000", "num_hidden_layers: 100000000 is out of range"),      # 1e8: a minute, 2 GB
    ("num_hidden_layers", "2000000000", "num_hidden_layers: 2000000000 is out of range"),    # MemoryError
    ("num_attention_heads", "1000000", "num_attention_heads: 1000000 is out of range"),
    ("hidden_size", "10000000", "hidden_size: 10000000 is out of range"),
    ("vocab_size", "1000000000", "vocab_size: 1000000000 is out of range"),
    ("max_position_embeddings", "10000000000", "max_position_embeddings: 10000000000 is out of range"),
    ("hidden_size", "NaN", "hidden_size: must be an integer"),
])
def test_an_absurd_number_in_config_json_is_one_line(tmp_path, key, raw, needle):
    text = json.dumps({**LLAMA, key: "PLACEHOLDER"}).replace('"PLACEHOLDER"', raw)
    result, config = _check(tmp_path, text)
    err = _one_line_error(result)
    assert err.startswith(f"vtriage: error: {config}: ") and needle in err, err
    assert len(err) < 400, err                                                # the value is clipped


def test_a_number_too_long_for_python_is_one_line(tmp_path):
    text = json.dumps({**LLAMA, "num_hidden_layers": "PLACEHOLDER"}).replace('"PLACEHOLDER"', "9" * 100_000)
    result, config = _check(tmp_path, text)
    err = _one_line_error(result)
    assert f"{config}:1: num_hidden_layers: a number of 100,000 digits" in err and len(err) < 400, err


@pytest.mark.parametrize("extra,needle", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 1e308, "original_max_position_embeddings": 32768}},
     "rope_scaling.factor: 1e+308 is out of range"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 10**400, "original_max_position_embeddings": 4096}},
     "rope_scaling.factor: 1000000000"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 10**30}},
     "rope_scaling.original_max_position_embeddings: 1000000000000000000000000000000 is out of range"),
    ({"quantization_config": {"quant_method": "awq", "bits": "4"}}, "quantization_config.bits: must be"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 10**400}},
     "quantization_config.group_size: 1000000000"),
    ({"mlp_only_layers": [{"a": 1}], "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 1024},
     "mlp_only_layers: must be a list of layer numbers"),
])
def test_absurd_nested_values_in_config_json_are_one_line(tmp_path, extra, needle):
    result, config = _check(tmp_path, json.dumps({**LLAMA, **extra}))
    err = _one_line_error(result)
    assert err.startswith(f"vtriage: error: {config}: ") and needle in err and len(err) < 400, err


# --- .vtriage.toml ---------------------------------------------------------------------------------------

def test_a_number_too_long_for_python_in_the_config_is_one_line(tmp_path):
    config = tmp_path / ".vtriage.toml"
    config.write_text('runbook_url = "https://wiki/{verdict}"\nexpires = ' + "9" * 100_000 + "\n")
    err = _one_line_error(run_cli(KV, "--config", str(config)))
    assert f"{config}: (file): not valid TOML: a number of 100,000 digits (at line 2" in err and len(err) < 400, err


def test_a_config_too_large_to_be_a_config_is_refused(tmp_path):
    config = tmp_path / ".vtriage.toml"
    config.write_text("# padding\n" * 200_000)
    err = _one_line_error(run_cli(KV, "--config", str(config)))
    assert f"{config}: (file): is 1.9 MiB" in err, err


def test_a_secret_where_a_number_belongs_is_not_echoed(tmp_path):
    token = "hf_Q7" + "abcdefghijKLMNOPqrst"
    result, _ = _check(tmp_path, json.dumps({**LLAMA, "hidden_size": f"{token}"}))
    err = _one_line_error(result)
    assert "hidden_size: must be an integer" in err and token not in err and "hf_Q7abcdef" not in err, err
