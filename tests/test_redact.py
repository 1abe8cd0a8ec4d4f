"""Secrets vLLM logs never reach a report unless asked for."""
from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from triage.redact import _QUICK, Redactor, _secret_spans, may_hold_secret

from conftest import run_cli

SECRETS = {
    "api_key": "sk-FAKE0123456789abcdefXYZ",
    "hf_token": "hf_FAKEFAKEFAKEFAKEFAKE1234",
    "bearer": "eyJhbGciOiJIUzI1NiJ9.FAKE.token",
    "url_password": "s3cr3tPassw0rd",
    "aws": "AKIAFAKEFAKEFAKE1234",
}
LOG = f"""INFO 05-14 08:01:02 api_server.py:585] args: Namespace(host=None, port=8000, api_key='{SECRETS['api_key']}', model='meta-llama/Llama-3.1-8B-Instruct', max_model_len=32768, gpu_memory_utilization=0.9, hf_token='{SECRETS['hf_token']}')
(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {{'model': 'm', 'api_key': ['{SECRETS['api_key']}'], 'max_model_len': 32768}}
WARNING 05-14 08:01:03 envs.py:1] HF_TOKEN={SECRETS['hf_token']} AWS_ACCESS_KEY_ID={SECRETS['aws']} proxy https://admin:{SECRETS['url_password']}@proxy.corp:3128
ERROR 05-14 08:01:04 client.py:1] request failed with header Authorization: Bearer {SECRETS['bearer']}
INFO 05-14 08:01:05 llm_engine.py:161] Initializing an LLM engine (v0.5.0) with config: model='https://admin:{SECRETS['url_password']}@models.corp/llama', tokenizer='m', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, quantization=None
WARNING 05-14 08:01:06 utils.py:9] Starting with VLLM_API_KEY={SECRETS['api_key']} and --api-key {SECRETS['api_key']}
huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url https://huggingface.co/m/resolve/main/config.json?token={SECRETS['hf_token']}.
ValueError: Free memory on device (31.02/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.
"""  # noqa: E501 - log lines as vLLM prints them


# A start-up that dies on a gated repository: the secrets sit in the deciding line, the config banner,
# an unrecognised WARNING (coverage groups) and a traceback, so every part of a report is exercised.
GATED_LOG = f"""INFO 05-14 08:01:02 api_server.py:585] args: Namespace(host=None, port=8000, api_key='{SECRETS['api_key']}', model='acme/private', hf_token='{SECRETS['hf_token']}')
WARNING 05-14 08:01:03 envs.py:1] unrecognised: HF_TOKEN={SECRETS['hf_token']} AWS_ACCESS_KEY_ID={SECRETS['aws']} via https://admin:{SECRETS['url_password']}@proxy.corp:3128
ERROR 05-14 08:01:04 client.py:1] request failed with header Authorization: Bearer {SECRETS['bearer']}
Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/huggingface_hub/utils/_http.py", line 406, in hf_raise_for_status
huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url https://huggingface.co/acme/private/resolve/main/config.json?token={SECRETS['hf_token']}.
"""  # noqa: E501 - log lines as vLLM prints them

# /metrics whose labels carry a model URL with a password, as a model served from a private mirror does.
METRICS = f"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="https://admin:{SECRETS['url_password']}@models.corp/llama"}} 3.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{model_name="https://admin:{SECRETS['url_password']}@models.corp/llama"}} 0.41
"""

FORMATS = ["text", "json", "markdown", "html"]


def _leaks(secret: str, text: str) -> bool:
    """Any 8 characters of the secret in the text (a template shows digits as N; half a secret leaks too)."""
    n = min(8, len(secret))
    return any(secret[i:i + n] in text for i in range(len(secret) - n + 1))


def _report(tmp_path, fmt, *extra):
    (tmp_path / "secret.log").write_text(LOG)
    (tmp_path / "gated.log").write_text(GATED_LOG)
    (tmp_path / "metrics.prom").write_text(METRICS)
    return run_cli("--format", fmt, *extra, cwd=tmp_path)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("inputs,verdict_code", [
    (["secret.log"], 1),
    (["gated.log"], 1),
    (["secret.log", "--metrics", "metrics.prom"], 1),
])
def test_no_secret_in_any_output_format(tmp_path, fmt, inputs, verdict_code):
    result = _report(tmp_path, fmt, *inputs)
    out = result.stdout.decode()
    assert result.returncode == verdict_code, result.stderr
    for kind, secret in SECRETS.items():
        assert secret not in out, f"{kind} leaked in {fmt} for {inputs}"
    # every format says that it hid something: people say how to see it, JSON counts it by kind
    if fmt == "json":
        assert json.loads(out)["redactions"]
    else:
        assert "--no-redact" in out, f"{fmt} does not say how to see redacted values"


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_redact_shows_them_in_every_format(tmp_path, fmt):
    out = _report(tmp_path, fmt, "gated.log", "--no-redact").stdout.decode()
    assert SECRETS["api_key"] in out and "--no-redact" not in out


def test_redactions_are_counted_by_kind(tmp_path):
    path = tmp_path / "secret.log"
    path.write_text(LOG)
    data = json.loads(run_cli("--format", "json", str(path)).stdout)
    kinds = data["redactions"]
    for kind in ("api_key", "hf_token", "bearer_token", "url_password", "aws_key"):
        assert kinds.get(kind, 0) >= 1, kinds


def test_evidence_span_survives_redaction():
    text = "args: Namespace(api_key='sk-FAKE0123456789abcdefXYZ', max_model_len=32768)"
    red, to_red = Redactor().redact_mapped(text)
    start = text.index("max_model_len")
    assert red[to_red(start):to_red(start) + len("max_model_len")] == "max_model_len"


def test_already_masked_values_are_left_alone():
    text = "non-default args: {'api_key': '***', 'hf_token': '***'}"
    redactor = Redactor()
    assert redactor.text(text) == text and not redactor.counts


def test_prompts_are_masked_on_request(tmp_path):
    """Prompt text that reaches evidence (here in an error line) is masked with --redact-prompts."""
    log = tmp_path / "p.log"
    log.write_text("ERROR 01-22 18:27:19 serving_chat.py:200] Error in preprocessing prompt inputs: prompt: "
                   "'my secret medical question', prompt_token_ids: [1, 2, 3]\n"
                   "ValueError: Invalid repository ID or local directory specified: 'acme/x'.\n")
    plain = run_cli("--format", "json", str(log)).stdout.decode()
    assert "my secret medical question" in plain
    masked = run_cli("--format", "json", "--redact-prompts", str(log)).stdout.decode()
    assert "my secret medical question" not in masked and json.loads(masked)["redactions"]["prompt"] >= 1


# Pieces of secrets and of the lines around them: names in every case and separator, the shapes'
# prefixes, quotes, URL parts, and the words a stats or request line holds (`tokens/s`, `max_tokens=`).
_PIECES = ["api_key", "API-KEY", "apikey", "key", "Token", "token", "tokens", "hf_token", "secret", "password",
           "db_passwd", "pwd", "pass", "credentials", "auth", "Authorization", "Bearer ", "sig", "hf",
           "=", ":", " ", "  ", "'", '"', "\\'", "--", "?", "&", ";", "@", "://", "https", "admin", "user.name",
           "hf_", "sk-", "ghp_", "github_pat_", "glpat-", "xoxb-", "xapp-", "AIza", "AKIA", "ASIA", "eyJ",
           "-----BEGIN RSA PRIVATE KEY-----", "-----END ", "abcdefghijklmnop", "ABCDEFGH12345678",
           "0123456789", ".", "_", "-", "[", "]", ",", "/s", "x", "\n",
           "(", ")", "b'", "name", "value", "Cookie", "set-cookie", "; ", "-u ", "--user", "curl", "mysql", "-p",
           "AccountKey", "SharedAccessSignature", "Pwd", "{", "}"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
@example(LOG)
@example(GATED_LOG)
@example("Avg prompt throughput: 3443.2 tokens/s, Avg generation throughput: 2075.4 tokens/s, Running: 54 reqs")
def test_the_quick_filter_never_skips_a_line_with_a_secret(text):
    """A line the pre-filter lets through unread must hold nothing any redaction rule would mask; the
    automaton's filter (used where the ahocorasick-rs wheel installs) answers as the regex does."""
    quick = _QUICK.search(text.lower()) is not None
    assert may_hold_secret(text) == quick, text
    if not quick:
        assert _secret_spans(text) == [], text


def test_stats_and_request_lines_skip_the_secret_rules():
    """The pre-filter is what keeps redaction off the per-line cost of a stats flood."""
    for line in ("Engine 000: Avg prompt throughput: 3443.2 tokens/s, Avg generation throughput: 2075.4 tokens/s, "
                 "Running: 54 reqs, Waiting: 4 reqs, GPU KV cache usage: 46.0%, Prefix cache hit rate: 30.7%",
                 "Request chatcmpl-21480046bc377f13 arrived; 561 prompt tokens, max_tokens=32."):
        assert not may_hold_secret(line) and not _QUICK.search(line.lower()), line


# Secrets a line holds only by where it stands: a PEM key's body lines, the value under a Kubernetes env name.
# Each body line is logged on its own (so each is its own unrecognised group), one apart from the next.
_E = "(APIServer pid=1) ERROR 09-30 10:01:2{} [tls.py:88] "
PEM_BODY = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7vbqajDw4o6gJ",
            "y8Hk1ITmQsnmLyRWaXZGh0lh5JnVUqQZq8FDPvAqnRZrCoU7Nh6BhKaKlWpXXx0s",
            "Zx4Ue1sQ2xW3q9QfKH8=", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtz"]
K8S_VALUE = "Qm9vdHN0cmFwVG9rZW4xMjM"
MULTILINE_LOG = "\n".join([
    "(APIServer pid=1) INFO 09-30 10:00:01 [api_server.py:1816] vLLM API server version 0.10.2",
    _E.format(0) + "could not load the TLS key:",
    _E.format(0) + "-----BEGIN RSA PRIVATE KEY-----",
    _E.format(1) + PEM_BODY[0],
    "(EngineCore_DP0 pid=310) WARNING 09-30 10:01:21 [core.py:1] engine still waiting",
    _E.format(1) + PEM_BODY[1],
    _E.format(2) + PEM_BODY[2],
    _E.format(2) + "-----END RSA PRIVATE KEY-----",
    _E.format(3) + "-----BEGIN OPENSSH PRIVATE KEY-----",
    _E.format(3) + PEM_BODY[3] + "-----END OPENSSH PRIVATE KEY-----",
    _E.format(4) + "pod spec env:",
    _E.format(4) + "  - name: HF_TOKEN",
    _E.format(4) + f"    value: {K8S_VALUE}",
    _E.format(5) + "  - name: MAX_MODEL_LEN",
    _E.format(5) + "    value: 'after the secret'",
]) + "\n"


@pytest.mark.parametrize("fmt", FORMATS)
def test_secrets_known_by_the_lines_before_them_are_masked(tmp_path, fmt):
    log = tmp_path / "tls.log"
    log.write_text(MULTILINE_LOG)
    every_group = fmt in ("json", "html")        # text and Markdown list the largest groups only
    shown = run_cli("--format", fmt, "--no-redact", "--no-config", str(log)).stdout.decode()
    reaching = [*PEM_BODY, K8S_VALUE] if every_group else PEM_BODY[:1]
    assert all(_leaks(secret, shown) for secret in reaching), "the lines reach the report"
    out = run_cli("--format", fmt, "--no-config", str(log)).stdout.decode()
    for secret in (*PEM_BODY, K8S_VALUE):
        assert not _leaks(secret, out), f"{secret} leaked in {fmt}"
    if every_group:
        assert "after the secret" in out and "engine still waiting" in out, "lines after the blocks are shown"
    if fmt == "json":
        assert json.loads(out)["redactions"]["private_key"] >= 4


# File names are shown in every report (each evidence line's place) and in errors.
NAME_SECRETS = {"run-hf_abcdefghijklmnopqrstuvwxyz123456.log": "abcdefghijklmnopqrstuvwxyz123456",
                "server.log?token=QWxhZGRpbjpvcGVuc2VzYW1l": "QWxhZGRpbjpvcGVuc2VzYW1l"}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", sorted(NAME_SECRETS))
def test_a_file_name_holding_a_token_is_masked(tmp_path, fmt, name):
    (tmp_path / name).write_text(GATED_LOG)
    secret = NAME_SECRETS[name]
    assert secret in run_cli("--format", fmt, "--no-redact", name, cwd=tmp_path).stdout.decode()
    out = run_cli("--format", fmt, name, cwd=tmp_path).stdout.decode()
    assert not _leaks(secret, out), f"the file name leaked in {fmt}"


@pytest.mark.parametrize("name", sorted(NAME_SECRETS))
def test_an_error_naming_a_file_holding_a_token_masks_it(tmp_path, name):
    result = run_cli(str(tmp_path / name))
    assert result.returncode == 2 and b"no such file" in result.stderr
    assert not _leaks(NAME_SECRETS[name], result.stderr.decode()), result.stderr


def test_an_error_quoting_a_secret_masks_it(tmp_path):
    """A /metrics line the parser rejects is echoed on stderr: a secret in it is masked there too."""
    metrics = tmp_path / "m.prom"
    metrics.write_text('# TYPE x gauge\nx{api_key="QWxhZGRpbjpvcGVuc2VzYW1l",bad-label="1"} 1\n')
    result = run_cli("--metrics", str(metrics))
    assert result.returncode == 2 and b"not a valid Prometheus metrics line" in result.stderr, result.stderr
    assert not _leaks("QWxhZGRpbjpvcGVuc2VzYW1l", result.stderr.decode()), result.stderr


def test_alerts_name_a_file_holding_a_token_masked(tmp_path):
    name = "run-hf_abcdefghijklmnopqrstuvwxyz123456.log"
    (tmp_path / name).write_text(GATED_LOG)
    result = run_cli("alerts", "--no-config", name, cwd=tmp_path)
    assert result.returncode == 0 and b"Generated by vtriage alerts from run-" in result.stdout, result.stderr
    assert not _leaks(NAME_SECRETS[name], result.stdout.decode())
