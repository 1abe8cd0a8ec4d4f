"""Series that are not vLLM's change nothing vLLM's series decide (issue 31 item 7).

A /metrics body holds more than vLLM's series: the process and Python collectors', a sidecar's, what
Prometheus adds (`up`, `scrape_*`), with or without labels or timestamps. The units a fleet is split into
and the snapshots' order and times come from vLLM's series alone, so adding any of those leaves every
verdict, confidence, exit code and figure as it was. The few other series vtriage reads on purpose
(dcgm-exporter's framebuffer figures, `process_start_time_seconds`: docs/metrics.md) are evidence, not
units or times; they are left out of what is drawn here, and the dcgm-exporter set shows they still count.
"""
from __future__ import annotations

import functools
import json
import os
import re
import tempfile
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triage import cli as cli_module
from triage.cli import cli
from triage.metrics.names import DCGM_FREE, DCGM_RESERVED, DCGM_USED, PROCESS_START

from conftest import FIXTURES

METRICS = FIXTURES / "metrics"
MANIFEST = tomllib.loads((METRICS / "manifest.toml").read_text())
FEDERATED_PAIR = ("federate-v1-0.30-qwen3-32b-pod-vllm-0-1.prom", "federate-v1-0.30-qwen3-32b-pod-vllm-0-2.prom")
SETS = {  # sets of the manifest, by their files
    FEDERATED_PAIR[::-1]: "a federated pair, timed by the timestamps in them",
    ("v0-0.4.3-llama3-8b-a10g-preempting-1.prom", "v0-0.4.3-llama3-8b-a10g-preempting-2.prom"):
        "a V0 pair, timed by --interval",
    ("v1-0.30-qwen3-32b-h200-recompute-storm-1.prom", "v1-0.30-qwen3-32b-h200-recompute-storm-2.prom"):
        "a V1 pair with no times: deltas",
    ("cpu-0.32-tiny-llama-preempting-1.prom", "cpu-0.32-tiny-llama-preempting-2.prom"):
        "a V1 pair holding the process and Python collectors' own series",
    ("v1-0.11.1-llama31-70b-dp2-engine1-preempting.prom",): "one snapshot of two engines: a fleet of two units",
    ("federate-v1-0.11.1-qwen3-8b-one-snapshot-young.prom",): "one federated snapshot, a rate from its uptime",
    ("v1-0.11.1-llama31-8b-h100-healthy.prom", "dcgm-h100-external.prom"):
        "a snapshot and dcgm-exporter's: external pressure from the GPU's figures",
}
ENTRIES = [entry for entry in MANIFEST["set"] if tuple(entry["files"]) in SETS]
READ_AS_EVIDENCE = {PROCESS_START, DCGM_USED, DCGM_FREE, DCGM_RESERVED}

# --- unrelated series --------------------------------------------------------------------------------

FAMILIAR_NAMES = ["process_resident_memory_bytes", "process_cpu_seconds_total", "python_gc_objects_collected_total",
                  "python_info", "go_goroutines", "go_memstats_alloc_bytes", "DCGM_FI_DEV_GPU_UTIL",
                  "DCGM_FI_DEV_GPU_TEMP", "node_memory_MemAvailable_bytes", "http_requests_total", "up",
                  "scrape_duration_seconds", "scrape_samples_scraped", "kube_pod_info", "vllmx_requests"]
NAME_PREFIXES = ["process_", "python_gc_", "go_", "DCGM_FI_", "node_", "http_", "scrape_", "job:", ""]
# The labels a unit is told by, and those that sit beside them, with the values the fixtures give them: a
# series that names the same pod, instance, model or engine as vLLM's joins that unit, and must stay a guest.
UNIT_LABELS = ["pod", "exported_pod", "instance", "namespace", "job", "model_name", "engine", "gpu", "UUID", "le"]
FIXTURE_LABEL_VALUES = sorted({value for entry in ENTRIES for name in entry["files"]
                               for value in re.findall(r'="([^"\\]*)"', (METRICS / name).read_text())
                               if len(value) < 60})
FEDERATED_TIMES_MS = [1764503940000, 1764504060000, 1780012800000]


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@st.composite
def unrelated_series(draw) -> list[str]:
    """The lines of one series of another exporter: its HELP and TYPE now and then, and one sample."""
    name = draw(st.one_of(
        st.sampled_from(FAMILIAR_NAMES),
        st.builds(str.__add__, st.sampled_from(NAME_PREFIXES), st.from_regex(r"[a-zA-Z][a-zA-Z0-9_:]{0,20}",
                                                                             fullmatch=True))))
    # vLLM's spellings are left out, and `vllm`: typed a counter, its samples are read as `vllm_total`
    if name.startswith(("vllm:", "vllm_")) or name == "vllm" or name in READ_AS_EVIDENCE:
        name = "x_" + name
    label_names = st.one_of(st.sampled_from(UNIT_LABELS), st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,12}", fullmatch=True))
    label_values = st.one_of(st.sampled_from(FIXTURE_LABEL_VALUES),
                             st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=20))
    labels = draw(st.dictionaries(label_names, label_values, max_size=4))
    value = draw(st.one_of(st.sampled_from(["1e9", "0", "1", "NaN", "+Inf", "-Inf", "3.5e+07"]),
                           st.floats(allow_nan=False, allow_infinity=False).map(repr),
                           st.integers(-(10 ** 20), 10 ** 20).map(str)))
    stamp = draw(st.one_of(st.none(), st.sampled_from(FEDERATED_TIMES_MS),
                           st.sampled_from(FEDERATED_TIMES_MS).flatmap(lambda t: st.integers(t - 600_000, t + 600_000)),
                           st.integers(0, 10 ** 14)))
    lines = []
    if draw(st.booleans()):
        lines.append(f"# HELP {name} {draw(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30))}")
    if draw(st.booleans()):
        lines.append(f"# TYPE {name} {draw(st.sampled_from(['gauge', 'counter', 'untyped']))}")
    written = ",".join(f'{key}="{_escaped(text)}"' for key, text in labels.items())
    lines.append(name + (f"{{{written}}}" if labels or draw(st.booleans()) else "") + f" {value}"
                 + (f" {stamp}" if stamp is not None else ""))
    return lines


Insertions = list[tuple[int, list[str]]]       # (the line before which, the lines put there)


@st.composite
def insertions(draw, text: str) -> Insertions:
    """One to three unrelated series, each with the line of `text` it goes before. Anywhere, even among a family's
    lines: the fixtures write every counter under its `_total` name, so a family cut in two keeps its samples'
    names (a sample `vllm:x` typed counter would be read `vllm:x_total` only next to its TYPE line)."""
    places = st.integers(0, len(text.splitlines()))
    return draw(st.lists(st.tuples(places, unrelated_series()), min_size=1, max_size=3))


def _inserted(text: str, where: Insertions) -> str:
    lines = text.splitlines()
    for at, series in sorted(where, key=lambda insertion: -insertion[0]):    # from the end: the places stay put
        lines[at:at] = series
    return "\n".join(lines) + "\n"


# --- what a report decides ----------------------------------------------------------------------------

_cached_toolkit = functools.lru_cache(maxsize=None)(cli_module.load_toolkit)
COPIED_AT = 1_764_500_000       # every copy's modification time: the same, so no copy is timed by it


@pytest.fixture(autouse=True)
def _rules_loaded_once(monkeypatch):
    monkeypatch.setattr(cli_module, "load_toolkit", _cached_toolkit)


def _run(bodies: dict[str, str], interval: float | None, *more: str) -> tuple[int, dict]:
    """`vtriage --format json --fail-on warning --metrics ... [MORE]` on the bodies saved under their names, in
    process: the exit code and the report."""
    with tempfile.TemporaryDirectory() as folder:
        args = ["--format", "json", "--fail-on", "warning", *more]
        for name, body in bodies.items():
            path = Path(folder) / name
            path.write_text(body)
            os.utime(path, (COPIED_AT, COPIED_AT))
            args += ["--metrics", str(path)]
        if interval is not None:
            args += ["--interval", str(interval)]
        result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.output)


def _decided(code: int, report: dict) -> dict:
    """What vLLM's series decide in a report: the verdict, its confidence and path, the exit code, every fact's
    figure, each unit's row in the fleet view and the metrics timeline (not the lines evidence is on: lines
    put in before it move it)."""
    fleet = report["fleet"]
    return {
        "exit code": code, "verdict": report["verdict"], "confidence": report["confidence"],
        "rule path": report["rule_path"],
        "facts": {name: (fact["value"], fact.get("note")) for name, fact in report["facts"].items()},
        "fleet": fleet and {"verdict": fleet["verdict"], "confidence": fleet["confidence"],
                            "detail": fleet["detail"], "counts": fleet["counts"],
                            "ordering": fleet["source"]["ordering"],
                            "units": [{key: row[key] for key in ("name", "model", "engine", "verdict", "confidence",
                                                                  "rule", "figures", "stands_out")}
                                      for row in fleet["instances"]]},
        "decided by": report["headline"]["decided_by"],
        **{timeline: [{key: value for key, value in point.items() if key not in ("source", "line")}
                      for point in report[timeline]]
           for timeline in ("timeline", "metrics_timeline")},
    }


def _bodies(entry: dict) -> dict[str, str]:
    return {name: (METRICS / name).read_text() for name in entry["files"]}


@functools.cache
def _as_bundled(files: tuple[str, ...]) -> dict:
    entry = next(entry for entry in ENTRIES if tuple(entry["files"]) == files)
    return _decided(*_run(_bodies(entry), entry.get("interval")))


def _federated_pair_with(line: str) -> dict[str, str]:
    return {name: (METRICS / name).read_text() + line + "\n" for name in FEDERATED_PAIR}


# --- the tests ----------------------------------------------------------------------------------------

def test_every_set_named_is_in_the_manifest():
    assert {tuple(entry["files"]) for entry in ENTRIES} == set(SETS)


@pytest.mark.parametrize("entry", ENTRIES, ids=[SETS[tuple(entry["files"])] for entry in ENTRIES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_unrelated_series_change_nothing_vllms_series_decide(entry, data):
    bodies = {name: _inserted(body, data.draw(insertions(body), label=name)) for name, body in _bodies(entry).items()}
    assert _decided(*_run(bodies, entry.get("interval"))) == _as_bundled(tuple(entry["files"]))


def test_an_unlabeled_process_series_keeps_the_federated_pairs_rate():
    """The case reported: one `process_resident_memory_bytes 1e9` line, without labels or a timestamp, in each
    of two /federate snapshots once untimed them, and the preemptions lost their rate."""
    code, report = _run(_federated_pair_with("process_resident_memory_bytes 1e9"), None)
    assert (report["verdict"], report["confidence"], code) == ("preemption_slowdown", "high", 1)
    assert report["facts"]["preemptions"]["value"] == 4
    assert report["facts"]["preemption_rate_per_min"]["value"] == 2.0
    assert report["headline"]["decided_by"].startswith("4 preemptions (2 per minute);")
    assert report["facts"]["metrics_window_seconds"]["value"] == 120.0
    assert "timestamps in the expositions" in report["facts"]["metrics_window_seconds"]["note"]


def test_a_time_window_is_measured_from_vllms_samples():
    """--since 5m reaches back from where vLLM's samples end. A series written without a timestamp is of its
    snapshot's time (the pair was once refused as having none), and one stamped a day later moves nothing (it
    once moved the end past every vLLM sample, and the window cut them all)."""
    for line in ("process_resident_memory_bytes 1e9", 'up{pod="vllm-0"} 1 1764600000000'):
        code, report = _run(_federated_pair_with(line), None, "--since", "5m")
        assert (report["verdict"], code) == ("preemption_slowdown", 1), line
        assert report["window"]["since"] == "2025-11-30 11:56:00", line
        assert report["window"]["samples_kept"] == report["window"]["samples_total"] == 36, line
        assert report["facts"]["preemption_rate_per_min"]["value"] == 2.0, line
        assert report["warnings"] == [], line
