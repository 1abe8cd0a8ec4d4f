"""Shared helpers: run the real pipeline on inline text or fixture files, and the CLI as a user does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import pytest

from triage.cli import load_toolkit
from triage.model import Report
from triage.pipeline import Incident, build_report
from triage.sources.files import LogInput

ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = ROOT / "rules"
FIXTURES = ROOT / "fixtures"
SHARED = ROOT.parent / "shared"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files on purpose")


_ARTIFACTS: list[str] = []


def note_artifacts(line: str) -> None:
    """Files a test wrote for a person to look at; the path is printed at the end of the run."""
    if line not in _ARTIFACTS:
        _ARTIFACTS.append(line)


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _ARTIFACTS:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def kit():
    return load_toolkit(str(RULES_DIR))


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def diagnose_text(kit, text: str, name: str = "log.txt", redact: bool = True) -> Report:
    """The whole pipeline on a log given as a string (as if read from a file)."""
    fd, tmp = tempfile.mkstemp(suffix=".log")
    path = Path(tmp)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    try:
        inp = LogInput(name=name, path=str(path))
        return build_report(Incident(logs=(inp,), redact=redact), kit)
    finally:
        path.unlink()


def diagnose_files(kit, *paths: Path) -> Report:
    from triage.sources.files import open_log
    return build_report(Incident(logs=tuple(open_log(str(p)) for p in paths)), kit)


def diagnose_with_metrics(kit, metrics, log_text: str | None = None, log_path: Path | None = None,
                          interval: float | None = None) -> Report:
    """The pipeline on /metrics snapshots (paths, oldest first), joined with a log when one is given."""
    from triage.metrics.inputs import read_files
    from triage.sources.files import open_log
    read = read_files([str(p) for p in metrics], interval)
    tmp = None
    if log_text is not None:
        fd, name = tempfile.mkstemp(suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(log_text)
        tmp = Path(name)
        inputs = [LogInput(name="log.txt", path=name)]
    else:
        inputs = [open_log(str(log_path))] if log_path else []
    try:
        return build_report(Incident(logs=tuple(inputs), metrics=read), kit)
    finally:
        if tmp:
            tmp.unlink()


REPORT_SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())


def json_report(*args: str) -> tuple[int, dict]:
    """`vtriage --format json ARGS`: the exit code and the report, which must be valid against the
    JSON Schema, with nothing on stderr."""
    result = run_cli("--format", "json", *args)
    assert result.stderr == b"", result.stderr.decode()
    data = json.loads(result.stdout)
    jsonschema.validate(data, REPORT_SCHEMA)
    return result.returncode, data


def run_cli(*args: str, stdin: bytes | None = None, env: dict | None = None, cwd: Path | None = None):
    """Run `python -m triage` in a subprocess: exit code, stdout and stderr exactly as a user sees them.
    Without `stdin` it is /dev/null, as from a terminal-less job: a pipe would be read as the log."""
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "triage", *args], check=False, input=stdin, capture_output=True,
                          stdin=subprocess.DEVNULL if stdin is None else None,
                          env=full_env, cwd=cwd or ROOT, timeout=120)


CONFIGS = FIXTURES / "configs"


def config_entries() -> list[dict]:
    """fixtures/configs/models.toml: each config.json, the model it is, and the model ids the fixture logs serve."""
    import tomllib
    return tomllib.loads((CONFIGS / "models.toml").read_text())["config"]


def load_spec(name: str):
    from triage.capacity.hfconfig import spec_from_json
    path = CONFIGS / name
    return spec_from_json(path.read_text(), str(path.relative_to(ROOT)))


def served_specs() -> dict:
    """Model id -> the ModelSpec of the config that describes it."""
    return {model: load_spec(entry["file"]) for entry in config_entries() for model in entry["serves"]}
