"""The overflow corpus: figures no server prints (1e400, a 400-digit integer, NaN, inf, 0, negatives)
in every place a figure enters, through every command that computes with them. Each is unknown where
it enters, so nothing downstream overflows, divides by zero or writes NaN into JSON: the diagnosis
completes (or the input is refused in one line), never `internal error`.

The seeded part mutates the numbers of the fixture logs and snapshots; the seed is fixed so a failure
reproduces (bench/fuzz.py runs the same shapes for as long as it is given)."""
from __future__ import annotations

import functools
import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import cli as cli_module
from triage.cli import cli
from triage.errors import TriageError

from conftest import FIXTURES, run_cli
from shapes import ABSURD, LOG_LINES, NUMBER, SNAPSHOT


@pytest.fixture(autouse=True)
def _rules_loaded_once(monkeypatch):
    monkeypatch.setattr(cli_module, "load_toolkit", _cached_toolkit)


_cached_toolkit = functools.lru_cache(maxsize=None)(cli_module.load_toolkit)


def _run(args: list[str]) -> str:
    """In-process, as the command line does: a TriageError is a one-line error; anything else is the bug."""
    result = CliRunner().invoke(cli, args)
    exc = result.exception
    if exc is not None and not isinstance(exc, (SystemExit, TriageError)):
        raise AssertionError(f"{args}: {type(exc).__name__}: {exc}") from exc
    if args[:2] == ["--format", "json"] and not isinstance(exc, TriageError) and result.exit_code in (0, 1, 3):
        json.loads(result.output, parse_constant=lambda c: pytest.fail(f"{c} in the JSON report of {args}"))
    return result.output


@pytest.mark.parametrize("absurd", ABSURD)
def test_an_absurd_figure_in_every_log_line(tmp_path, absurd):
    path = tmp_path / "absurd.log"
    path.write_text("\n".join(line.format(n=absurd, s=i) for i, line in enumerate(LOG_LINES)) + "\n")
    for args in (["--format", "json", str(path)], ["whatif", str(path), "--max-model-len", "4096", "--format", "json"],
                 ["check", "--from-log", str(path), "--max-num-seqs", "256"], ["diff", str(path), str(path)]):
        _run(args)


@pytest.mark.parametrize("absurd", ["1e400", "nan", "0", "-1", "9" * 5000, "1e-320"])
@pytest.mark.parametrize("line", range(len(LOG_LINES)))
def test_one_absurd_figure_among_sane_ones(tmp_path, absurd, line):
    """A zero GPU total beside a real max_model_len once divided by zero: only one line is absurd here."""
    path = tmp_path / "one.log"
    path.write_text("\n".join(text.format(n=absurd if i == line else "8", s=i)
                              for i, text in enumerate(LOG_LINES)) + "\n")
    _run(["--format", "json", str(path)])
    _run(["whatif", str(path), "--max-model-len", "4096", "--format", "json"])


@pytest.mark.parametrize("absurd", ABSURD)
def test_an_absurd_figure_in_every_metric(tmp_path, absurd):
    first, second = tmp_path / "m0.prom", tmp_path / "m1.prom"
    first.write_text(SNAPSHOT.format(n=absurd, t="1700000000000"))
    second.write_text(SNAPSHOT.format(n=absurd, t=absurd if "." not in absurd and "e" not in absurd
                                      else "1700000005000"))
    _run(["--format", "json", "--metrics", str(first), "--metrics", str(second)])
    _run(["--format", "json", "--metrics", str(first), "--metrics", str(second), "--interval", "5"])
    _run(["whatif", str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log"),
          "--max-num-seqs", "64", "--metrics", str(first), "--metrics", str(second)])


@pytest.mark.parametrize("name", ["federate-v1-0.30-qwen3-32b-pod-vllm-0-1.prom", "v1-preempting-0.prom",
                                  "v1-qwen3-32b-lengths-0.prom", "dcgm-h100-external.prom"])
def test_the_same_snapshot_twice(name):
    """Two snapshots with the same timestamps span no time: no rate, no share, no division by zero."""
    path = str(FIXTURES / "metrics" / name)
    _run(["--format", "json", "--metrics", path, "--metrics", path])


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e308", '"lots"', "-5", "true"])
def test_a_gpu_snapshot_with_absurd_memory(tmp_path, value):
    path = tmp_path / "gpu.json"
    path.write_text('{"vtriage_gpu_snapshot": 1, "taken_at": null, "host": null, "driver": null, "source": "nvml",\n'
                    f'  "gpus": [\n    {{"index": 0, "name": "H100", "uuid": "G", "total_mib": {value}, '
                    f'"used_mib": {value}, '
                    f'"free_mib": {value}}}\n  ],\n  "processes": [\n    {{"gpu": 0, "pid": 7, "ppid": '
                    'null, "name": "python3", '
                    f'"used_mib": {value}, "vllm": false, "why": "x", "cmdline": null}}\n  ]\n}}\n')
    log = FIXTURES / "logs" / "v1" / "external_pressure-mistral-small-24b-a100-free-mem-below-util.log"
    _run(["--format", "json", str(log), "--gpu-snapshot", str(path)])
    _run(["gpu", "--from", str(path)])


def test_nvidia_smi_with_absurd_digits(tmp_path):
    text = (Path(__file__).resolve().parents[1] / "data" / "gpu" / "nvidia-smi-h100-notebook.txt").read_text()
    path = tmp_path / "smi.txt"
    path.write_text(re.sub(r"\d+MiB", "9" * 400 + "MiB", text))
    _run(["gpu", "--from", str(path)])


@pytest.mark.parametrize("where,text", [
    (".vtriage.toml", "a = " + "[" * 20_000 + "]" * 20_000 + "\n"),
    ("config.json", "[" * 100_000 + "]" * 100_000),
    ("gpu.json", "[" * 100_000 + "]" * 100_000),
    ("deep.log", '{"log": ' + "[" * 100_000 + "]" * 100_000 + "}\n"),
])
def test_nesting_deeper_than_the_parser_goes(tmp_path, where, text):
    path = tmp_path / where
    path.write_text(text)
    args = {".vtriage.toml": ["--config", str(path),
                              str(FIXTURES / "logs" / "v1" / "healthy-qwen3-8b-h200-033-tty-colour-logo.log")],
            "config.json": ["check", "--model-config", str(path), "--gpu-memory-gib", "80"],
            "gpu.json": ["gpu", "--from", str(path)],
            "deep.log": ["--format", "json", str(path)]}[where]
    result = run_cli(*args)
    err = result.stderr.decode()
    assert "internal error" not in err and "Traceback" not in err, err
    assert result.returncode in (0, 1, 2, 3) and err.count("\n") <= 1, err


@pytest.mark.parametrize("args", [
    ["--metrics-url", "http://[::1"], ["--metrics-url", "http://[zz]:80/metrics"], ["--metrics-url", "http://h:99999/m"],
    ["--prometheus", "http://[::1"], ["--interval", "nan", "--metrics-url", "http://127.0.0.1:9/m"],
    ["--read-timeout", "inf", "--metrics-url", "http://127.0.0.1:9/m"],
    ["--prometheus", "http://127.0.0.1:9", "--since", "1e400"],
    ["--prometheus", "http://127.0.0.1:9", "--step", "nan"], ["--prometheus", "http://127.0.0.1:9", "--at", "nan"],
    ["whatif", "LOG", "--max-model-len", "9" * 40], ["whatif", "LOG", "--cpu-offload-gb", "1e400"],
    ["check", "--model-config", "CONFIG", "--gpu-memory-gib", "1e400"],
    ["check", "--model-config", "CONFIG", "--gpu-memory-gib", "80", "--expect-prompt-tokens", "9" * 40,
     "--expect-output-tokens", "1"],
])
def test_absurd_command_line_figures_are_usage_errors(args):
    log = str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")
    config = str(next((FIXTURES / "configs").glob("*.json")))
    result = run_cli(*[log if a == "LOG" else config if a == "CONFIG" else a for a in args])
    err = result.stderr.decode()
    assert result.returncode == 2 and err.count("\n") == 1 and "internal error" not in err, err


def _mutations(count: int, seed: int) -> list[tuple[str, str]]:
    """(suffix, text): fixture logs and snapshots with about a third of their numbers made absurd."""
    sources = sorted((FIXTURES / "logs").rglob("*.log")) + sorted((FIXTURES / "metrics").glob("*.prom"))
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        source = rng.choice(sources)
        text = NUMBER.sub(lambda m: rng.choice(ABSURD) if rng.random() < 0.3 else m.group(0),
                           source.read_text(errors="replace"))
        out.append((source.suffix, text))
    return out


@pytest.mark.parametrize("index,case", list(enumerate(_mutations(48, seed=15))))
def test_mutated_fixtures(tmp_path, index, case):
    suffix, text = case
    path = tmp_path / f"mutated{suffix}"
    path.write_text(text)
    if suffix == ".prom":
        _run(["--format", "json", "--metrics", str(path), "--metrics", str(path), "--interval", "5"])
        return
    command = [["--format", "json", str(path)], ["whatif", str(path), "--max-model-len", "4096"],
               ["check", "--from-log", str(path), "--max-num-seqs", "512"], ["diff", str(path), str(path)]][index % 4]
    _run(command)
