"""Property tests: any text into any parser, no exception out, every line accounted for."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triage.envelope import records
from triage.errors import InputError
from triage.logparse import LogParse
from triage.metricparse import parse_exposition
from triage.model import VERDICTS
from triage.pipeline import build_report
from triage.redact import Redactor
from triage.render.json import report_dict
from triage.sources import iter_lines, open_log

from conftest import RULES_DIR
from test_docs import SCHEMA

from triage.cli import load_toolkit

KIT = load_toolkit(str(RULES_DIR))
SAMPLES = [sample for sig in KIT.signatures.signatures for sample in sig.samples]
PREFIXES = ["", "(APIServer pid=1) ", "(EngineCore_DP0 pid=7) ", "[rank0]: ", "2025-07-07T15:19:48.123Z ",
            "vllm-1  | ", "\x1b[32mINFO\x1b[0m ", "^[[0;36m", "INFO 01-01 00:00:00 [x.py:1] ", "{\"log\": \""]


@st.composite
def log_line(draw) -> str:
    """A line that is partly vLLM: a real sample, cut, prefixed, or noise."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.text(max_size=200))
    sample = draw(st.sampled_from(SAMPLES))
    if kind == 1:
        cut = draw(st.integers(0, len(sample)))
        sample = sample[:cut]
    return draw(st.sampled_from(PREFIXES)) + sample + draw(st.text(max_size=20))


log_text = st.lists(log_line(), max_size=40).map(lambda lines: "\n".join(lines))
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.lists(st.text(max_size=300), max_size=30))
def test_envelope_never_fails_and_keeps_line_numbers(lines):
    numbered = list(enumerate(lines, start=1))
    for rec in records(numbered):
        assert 1 <= rec.line <= len(lines)


@FAST
@given(log_text)
def test_parser_accounts_for_every_line(text):
    lines = text.split("\n")
    parse = LogParse("t.log", list(enumerate(lines, start=1)), KIT.signatures, Redactor())
    events = list(parse)
    summary = parse.summary
    assert summary.lines_read == len(lines)
    assert 0 <= summary.lines_recognised <= summary.lines_read
    assert 0 <= summary.vllm_lines <= summary.lines_read
    assert all(1 <= e.source.line <= len(lines) for e in events)
    assert sum(g.count for g in parse.unrecognised) <= summary.lines_read - summary.lines_recognised


def _file(data: bytes) -> Path:
    handle = tempfile.NamedTemporaryFile(delete=False, suffix=".log")
    handle.write(data)
    handle.close()
    return Path(handle.name)


@FAST
@given(log_text)
def test_whole_pipeline_gives_a_valid_report(text):
    path = _file(text.encode("utf-8", "surrogatepass"))
    try:
        try:
            report = build_report([open_log(str(path))], KIT, Redactor())
        except InputError as err:                   # mostly control characters: refused as binary
            assert "binary" in str(err) and "\n" not in str(err)
            return
        assert report.diagnosis.verdict in VERDICTS
        jsonschema.validate(json.loads(json.dumps(report_dict(report), default=str)), SCHEMA)
        (log,) = report.inputs
        assert log.lines_read == text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    finally:
        path.unlink()


@FAST
@given(st.binary(max_size=4000))
def test_any_bytes_are_read_or_refused_cleanly(data):
    path = _file(data)
    try:
        inp = open_log(str(path))
        try:
            lines = list(iter_lines(inp, KIT.signatures.bulk_patterns))
        except InputError as err:
            assert "\n" not in str(err)
            return
        assert all(1 <= n <= inp.lines_read for n, _ in lines)
        assert inp.lines_read == data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    finally:
        path.unlink()


METRIC_LINES = ["# TYPE vllm:num_requests_running gauge", "vllm:num_requests_running{model_name=\"m\"} 3.0",
                "vllm:num_preemptions_total{engine=\"0\"} 12", "vllm:kv_cache_usage_perc 0.5", "# HELP x y", "",
                "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1.0"]


@FAST
@given(st.lists(st.one_of(st.sampled_from(METRIC_LINES), st.text(max_size=60)), max_size=20))
def test_metrics_parser_parses_or_names_the_line(lines):
    text = "\n".join(lines) + "\n"
    try:
        samples = parse_exposition(text, "m.prom")
    except InputError as err:
        assert str(err).startswith("m.prom:") and "\n" not in str(err)
        return
    assert all(0 <= s.source.line <= len(lines) for s in samples)


def test_fuzz_target_runs_on_the_fixture_corpus():
    """bench/fuzz.py's target (the whole parser middle) accepts every fixture and mangled copies of them."""
    import importlib.util
    import random
    from conftest import FIXTURES, ROOT
    spec = importlib.util.spec_from_file_location("fuzz", ROOT / "bench" / "fuzz.py")
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    target = fuzz.make_target()
    rnd = random.Random(0)
    for path in sorted((FIXTURES / "logs").rglob("*.log")):
        data = path.read_bytes()
        target(data)
        mangled = bytearray(data[:3000])
        for _ in range(30):
            if mangled:
                mangled[rnd.randrange(len(mangled))] = rnd.randrange(256)
        target(bytes(mangled))
