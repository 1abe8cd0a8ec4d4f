"""The secret matrix: every form a secret takes in a log, in every place a log line can reach a report,
through every output format and subcommand. Zero leaks, and each placement is shown to reach the
report (with --no-redact the secret is there), so no cell of the matrix passes by never being printed.

Each (form, placement) gets its own random-looking secret, and a leak is any 8-character piece of it:
masking half a password is a leak too.
"""
from __future__ import annotations

import functools
import hashlib
import json
import string
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import cli as cli_module
from triage.cli import cli
from triage.gpu import probe, snapshot_json
from triage.httpget import display_url, parse_header
from triage.errors import InputError


@pytest.fixture(autouse=True)
def _rules_loaded_once(monkeypatch):
    """The matrix runs the command line in-process hundreds of times: load the bundled rules once."""
    monkeypatch.setattr(cli_module, "load_toolkit", _cached_toolkit)


_cached_toolkit = functools.lru_cache(maxsize=None)(cli_module.load_toolkit)


def _random(seed: str, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    """A deterministic random-looking string with at least one upper, lower and digit (vendors' shapes)."""
    digest = hashlib.sha256(seed.encode()).digest() * 8
    body = "".join(alphabet[b % len(alphabet)] for b in digest[:n])
    return body


def _mixed(seed: str, n: int) -> str:
    return _random(seed, n - 2) + "Q7"


# Form -> (template, what to fill in). Placeholders: {s} (and {t}) are the secrets.
FORMS: dict[str, tuple[str, dict[str, tuple[str, int]]]] = {
    "env VLLM_API_KEY": ("VLLM_API_KEY={s}", {"s": ("mixed", 24)}),
    "env OPENAI_API_KEY": ("OPENAI_API_KEY={s}", {"s": ("mixed", 24)}),
    "env DB_PASSWORD": ("DB_PASSWORD={s}", {"s": ("mixed", 16)}),
    "env PGPASSWORD": ("PGPASSWORD={s}", {"s": ("mixed", 16)}),
    "env SECRET_KEY": ("SECRET_KEY={s}", {"s": ("mixed", 20)}),
    "env GITHUB_TOKEN": ("GITHUB_TOKEN={s}", {"s": ("mixed", 20)}),
    "env HF_TOKEN": ("HF_TOKEN={s}", {"s": ("mixed", 20)}),
    "env HUGGING_FACE_HUB_TOKEN": ("HUGGING_FACE_HUB_TOKEN={s}", {"s": ("mixed", 20)}),
    "env AWS_SECRET_ACCESS_KEY": ("AWS_SECRET_ACCESS_KEY={s}", {"s": ("mixed", 40)}),
    "env REDIS_PASS": ("REDIS_PASS={s}", {"s": ("mixed", 14)}),
    "env quoted with spaces": ('DB_PASSWORD="{s} {t}"', {"s": ("mixed", 10), "t": ("mixed", 10)}),
    "dict api_key list": ("'api_key': ['{s}', '{t}']", {"s": ("mixed", 20), "t": ("mixed", 20)}),
    "namespace api_key": ("api_key='{s}'", {"s": ("mixed", 20)}),
    "namespace api_key list": ("api_key=['{s}', '{t}']", {"s": ("mixed", 20), "t": ("mixed", 20)}),
    "json api_key": ('"api_key": "{s}"', {"s": ("mixed", 20)}),
    "json client_secret": ('"client_secret":"{s}"', {"s": ("mixed", 20)}),
    "yaml password": ("password: {s}", {"s": ("mixed", 14)}),
    "flag --api-key": ("--api-key {s}", {"s": ("mixed", 20)}),
    "flag --api-key=": ("--api-key={s}", {"s": ("mixed", 20)}),
    "flag --password": ("--password {s}", {"s": ("mixed", 14)}),
    "flag --token": ("--token {s}", {"s": ("mixed", 20)}),
    "flag --hf-token": ("--hf-token {s}", {"s": ("mixed", 20)}),
    "url user:password": ("https://deploy:{s}@models.corp/llama", {"s": ("mixed", 14)}),
    "url empty user": ("redis://:{s}@redis:6379/0", {"s": ("mixed", 14)}),
    "url token as user": ("https://{s}@github.com/acme/m.git", {"s": ("mixed", 40)}),
    "bare user:password@host": ("admin:{s}@db.internal:5432", {"s": ("mixed", 14)}),
    "url ?token=": ("https://huggingface.co/m/resolve/main/config.json?token={s}", {"s": ("mixed", 20)}),
    "url ?hf=": ("http://mirror.corp/m?hf={s}&rev=main", {"s": ("mixed", 20)}),
    "header bearer": ("Authorization: Bearer {s}", {"s": ("mixed", 30)}),
    "header basic": ("Authorization: Basic {s}", {"s": ("mixed", 24)}),
    "header token scheme": ("authorization: Token {s}", {"s": ("mixed", 24)}),
    "header no scheme": ("{{'Authorization': '{s}'}}", {"s": ("mixed", 24)}),
    "header proxy": ("Proxy-Authorization: Basic {s}", {"s": ("mixed", 24)}),
    "header x-api-key": ("X-Api-Key: {s}", {"s": ("mixed", 24)}),
    "hf_ short": ("hf_{s}", {"s": ("mixed", 8)}),
    "hf_ long": ("hf_{s}", {"s": ("mixed", 34)}),
    "sk- openai": ("sk-proj-{s}", {"s": ("mixed", 40)}),
    "ghp_": ("ghp_{s}", {"s": ("mixed", 36)}),
    "github_pat_": ("github_pat_{s}", {"s": ("mixed", 60)}),
    "AKIA": ("AKIA{s}", {"s": ("upper", 16)}),
    "xoxb": ("xoxb-1234-{s}", {"s": ("mixed", 24)}),
    "glpat": ("glpat-{s}", {"s": ("mixed", 20)}),
    "AIza": ("AIza{s}", {"s": ("mixed", 35)}),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJ{s}.{t}", {"s": ("mixed", 20), "t": ("mixed", 24)}),
    "pem": ("-----BEGIN RSA PRIVATE KEY-----MIIE{s}{t}-----END RSA PRIVATE KEY-----",
            {"s": ("mixed", 30), "t": ("mixed", 30)}),
}
# Forms without spaces or quotes can stand where a model name does (and become facts.model and the command).
MODEL_FORMS = {name for name, (template, _) in FORMS.items()
               if " " not in template and "'" not in template and '"' not in template}


def _fill(form: str, placement: str) -> tuple[str, list[str]]:
    template, holes = FORMS[form]
    values = {}
    for hole, (kind, n) in holes.items():
        seed = f"{form}/{placement}/{hole}"
        values[hole] = _random(seed, n, string.ascii_uppercase + string.digits) if kind == "upper" else _mixed(seed, n)
    return template.format(**values), list(values.values())


P = "(APIServer pid=1)"
E = "(EngineCore_DP0 pid=310)"
# placement -> a line with {form} in it (None: the placement is outside the log).
PLACEMENTS: dict[str, str | None] = {
    "args": P + " INFO 09-30 10:00:02 [utils.py:328] non-default args: {{'model': '{model}', "
                "'max_model_len': 131072, 'gpu_memory_utilization': 0.85, 'extra': {form}}}",
    "environment warning": P + " WARNING 09-30 10:00:03 [envs.py:120] environment: {form}",
    "request error": P + " ERROR 09-30 10:00:04 [serving_chat.py:210] request failed, headers: {form} (status 500)",
    "model name": E + " INFO 09-30 10:00:20 [gpu_model_runner.py:1953] Starting to load model {form}...",
    "deciding line": E + " ERROR 09-30 10:01:21 [core.py:708] ValueError: To serve at least one request with the "
                         "models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
                         "available KV cache memory (7.22 GiB). Based on the available memory, the estimated maximum "
                         "model length is 59136. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                         "when initializing the engine. {form}",
    "exception chain": P + " RuntimeError: Engine core initialization failed. See root cause above. {form}",
    "unrecognised error": P + " ERROR 09-30 10:01:22 [launcher.py:1] shutting down with {form}",
    "metrics label": None,
}

BASE = [
    P + " INFO 09-30 10:00:01 [api_server.py:1816] vLLM API server version 0.10.2",
    "{args}", "{environment warning}", "{request error}", "{model name}",
    E + " INFO 09-30 10:00:51 [default_loader.py:267] Loading weights took 28.40 seconds",
    E + " INFO 09-30 10:00:52 [gpu_model_runner.py:2007] Model loading took 23.32 GiB and 29.104213 seconds",
    E + " INFO 09-30 10:01:20 [gpu_worker.py:298] Available KV cache memory: 7.22 GiB",
    E + " ERROR 09-30 10:01:21 [core.py:708] EngineCore failed to start.",
    "{deciding line}", "{exception chain}", "{unrecognised error}",
]


def _incident(form: str, tmp_path: Path) -> tuple[dict[str, list[str]], Path, Path]:
    """A log and a /metrics snapshot holding `form` in every placement; the secrets by placement."""
    secrets: dict[str, list[str]] = {}
    filled: dict[str, str] = {}
    model = "google/gemma-3-12b-it"
    if form in MODEL_FORMS:       # the model name: in the args (facts.model, the command) and the load line
        model, secrets["model name"] = _fill(form, "model name")
    for placement, line in PLACEMENTS.items():
        if placement != "model name":
            text, secrets[placement] = _fill(form, placement)
            filled[placement] = line.format(form=text, model=model) if line else text
    filled["model name"] = PLACEMENTS["model name"].format(form=model)  # type: ignore[union-attr]
    log = tmp_path / "server.log"
    log.write_text("\n".join(line.format(**filled) if line.startswith("{") else line for line in BASE) + "\n")
    label = filled["metrics label"].replace("\\", "\\\\").replace('"', '\\"')
    metrics = tmp_path / "m.prom"
    metrics.write_text("# TYPE vllm:num_requests_running gauge\n"
                       f'vllm:num_requests_running{{model_name="{label}"}} 3.0\n'
                       "# TYPE vllm:gpu_cache_usage_perc gauge\n"
                       f'vllm:gpu_cache_usage_perc{{model_name="{label}"}} 0.41\n')
    return secrets, log, metrics


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.output)
    assert result.exit_code in (0, 1, 3), (args, result.output)
    return result.output


def _outputs(log: Path, metrics: Path, tmp_path: Path) -> dict[str, str]:
    """Every output a user can get that carries log text: stdout, stderr and -o files alike."""
    runs = {f"diagnose {fmt}": ["--format", fmt, "--no-config", str(log), "--metrics", str(metrics)]
            for fmt in ("text", "json", "markdown", "html")}
    runs.update({f"diff {fmt}": ["diff", "--format", fmt, "--no-config", str(log), str(log)] for fmt in ("text", "json")})
    runs.update({f"whatif {fmt}": ["whatif", str(log), "--max-model-len", "32768", "--format", fmt]
                 for fmt in ("text", "json")})
    runs.update({f"check {fmt}": ["check", "--from-log", str(log), "--max-num-seqs", "64", "--format", fmt]
                 for fmt in ("text", "json")})
    runs["alerts"] = ["alerts", "--no-config", str(log)]
    runs["diagnose markdown -o"] = ["--format", "markdown", "--no-config", str(log), "-o", str(tmp_path / "r.md")]
    out = {name: _run(args) for name, args in runs.items()}
    out["diagnose markdown -o"] += (tmp_path / "r.md").read_text()
    return out


def _leaks(secret: str, text: str) -> bool:
    """Any 8-character piece of the secret in the text (a secret masked in half still leaks)."""
    n = min(8, len(secret))
    return any(secret[i:i + n] in text for i in range(len(secret) - n + 1))


@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_secret_reaches_any_output(tmp_path, form):
    secrets, log, metrics = _incident(form, tmp_path)
    shown = _run(["--format", "json", "--no-config", "--no-redact", str(log), "--metrics", str(metrics)])
    for placement, values in secrets.items():
        for value in values:
            assert value in shown, f"{form} in {placement}: never reaches the report, so the cell proves nothing"
    outputs = _outputs(log, metrics, tmp_path)
    leaks = [(placement, name) for placement, values in secrets.items() for value in values
             for name, text in outputs.items() if _leaks(value, text)]
    assert not leaks, f"{form} leaked: {leaks}"
    assert json.loads(outputs["diagnose json"])["redactions"]


def test_the_suggested_command_and_model_fact_are_masked(tmp_path):
    secrets, log, metrics = _incident("url user:password", tmp_path)
    data = json.loads(_outputs(log, metrics, tmp_path)["diagnose json"])
    assert "***" in data["facts"]["model"]["value"] and "***" in data["command"]


def test_a_header_value_never_appears_in_an_error():
    for given in ("Authorization Bearer-TOKEN-1234567", "TOKEN-1234567", "Authorization:", "X-Key TOKEN-1234567"):
        with pytest.raises(InputError) as err:
            parse_header(given)
        assert "TOKEN-1234567" not in str(err.value)


@pytest.mark.parametrize("url", ["http://user:TOKEN-1234567@[::1/metrics", "http://[::1]:8000/m?token=TOKEN-1234567",
                                 "http://h/m?hf=TOKEN-1234567", "https://:TOKEN-1234567@h:99999/metrics"])
def test_a_url_is_shown_without_its_secrets(url):
    assert "TOKEN-1234567" not in display_url(url)


def test_a_gpu_snapshot_keeps_no_secret_from_a_command_line():
    class Nvml:
        class NVMLError(Exception):
            pass

        def nvmlInit(self): pass
        def nvmlShutdown(self): pass
        def nvmlSystemGetDriverVersion(self): return "550"
        def nvmlDeviceGetCount(self): return 1
        def nvmlDeviceGetHandleByIndex(self, i): return i
        def nvmlDeviceGetName(self, h): return "H100"
        def nvmlDeviceGetUUID(self, h): return "GPU-1"

        def nvmlDeviceGetMemoryInfo(self, h):
            return type("M", (), {"total": 80 << 30, "used": 70 << 30, "free": 10 << 30})()

        def nvmlDeviceGetComputeRunningProcesses(self, h):
            return [type("P", (), {"pid": 7, "usedGpuMemory": 60 << 30})()]

        def nvmlSystemGetProcessName(self, pid): return "python3"

    class Proc:
        def cmdline(self, pid): return "python3 -m vllm.entrypoints.openai.api_server --api-key TOKEN-1234567"
        def parent(self, pid): return None

    snap = probe(Nvml(), proc=Proc())
    assert snap.processes[0].vllm is True, "classified by the real command line"
    assert "TOKEN-1234567" not in snapshot_json(snap)
