"""The secret matrix: every form a secret takes in a log, in every place a log line can reach a report,
through every output format and subcommand. Zero leaks, and each placement is shown to reach the
report (with --no-redact the secret is there), so no cell of the matrix passes by never being printed.

Each (form, placement) gets its own random-looking secret, and a leak is any 8-character piece of it:
masking half a password is a leak too.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import cli as cli_module
from triage.cli import cli
from triage.errors import InputError
from triage.gpu.probe import probe, snapshot_json
from triage.metrics.httpget import display_url, parse_header

from shapes import FORMS, MODEL_FORMS, fill


@pytest.fixture(autouse=True)
def _rules_loaded_once(monkeypatch):
    """The matrix runs the command line in-process hundreds of times: load the bundled rules once."""
    monkeypatch.setattr(cli_module, "load_toolkit", _cached_toolkit)


_cached_toolkit = functools.lru_cache(maxsize=None)(cli_module.load_toolkit)


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
        model, secrets["model name"] = fill(form, "model name")
    for placement, line in PLACEMENTS.items():
        if placement != "model name":
            text, secrets[placement] = fill(form, placement)
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
    runs.update({f"diff {fmt}": ["diff", "--format", fmt, "--no-config", str(log), str(log)]
                 for fmt in ("text", "json")})
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
