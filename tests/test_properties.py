"""Property tests: any text into any parser, no exception out, every line accounted for."""
from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from triage.cli import load_toolkit
from triage.errors import InputError
from triage.logs.envelope import records
from triage.logs.parse import LogParse
from triage.metrics.parse import MAX_SERIES, SeriesCache, parse_exposition, parse_plain_lines, parse_with_client
from triage.pipeline import Incident, build_report
from triage.redact import Redactor
from triage.render.json import report_dict
from triage.sources import files, scan
from triage.sources.files import LineReader, numbered_lines, open_log
from triage.vocabulary import VERDICTS

from conftest import RULES_DIR
from test_docs import SCHEMA

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


log_text = st.lists(log_line(), max_size=40).map("\n".join)
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
    summary = parse.result().summary
    assert summary.lines_read == len(lines)
    assert 0 <= summary.lines_recognised <= summary.lines_read
    assert 0 <= summary.vllm_lines <= summary.lines_read
    assert all(1 <= e.source.line <= len(lines) for e in events)
    assert sum(g.count for g in parse.result().unrecognised) <= summary.lines_read - summary.lines_recognised


def _file(data: bytes) -> Path:
    handle = tempfile.NamedTemporaryFile(delete=False, suffix=".log")
    handle.write(data)
    handle.close()
    return Path(handle.name)


def _lines_in(data: bytes) -> int:
    """Lines as the reader numbers them: NUL bytes are skipped; lines end at \\n, or at a lone \\r in a text
    whose only \\n (if any) is its last byte; the last line may lack its end."""
    text = data.replace(b"\0", b"")
    if b"\r" in text and b"\n" not in text[:-1]:
        text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)


@FAST
@given(log_text)
@example("(VllmWorkerProcess pid=771) ERROR 02-20 16:12:40 multiproc_worker_utils.py:233] Exception in worker "
         "VllmWorkerProcess while processing method start_worker_execution_loop.{")    # a brace in a quoted line
def test_whole_pipeline_gives_a_valid_report(text):
    path = _file(text.encode("utf-8", "surrogatepass"))
    try:
        try:
            report = build_report(Incident(logs=(open_log(str(path)),)), KIT)
        except InputError as err:                   # mostly control characters: refused as binary
            assert "binary" in str(err) and "\n" not in str(err)
            return
        assert report.diagnosis.verdict in VERDICTS
        jsonschema.validate(json.loads(json.dumps(report_dict(report), default=str)), SCHEMA)
        (log,) = report.inputs
        data = text.encode("utf-8", "surrogatepass")
        if not files._utf16_without_bom(data):         # UTF-16's lines are counted in the decoded text
            assert log.lines_read == _lines_in(data)
    finally:
        path.unlink()


@FAST
@given(st.binary(max_size=4000))
def test_any_bytes_are_read_or_refused_cleanly(data):
    path = _file(data)
    try:
        reader = LineReader(open_log(str(path)), KIT.signatures.bulk_patterns)
        try:
            lines = list(reader)
        except InputError as err:
            assert "\n" not in str(err)
            return
        lines_read = reader.result().lines_read
        assert all(1 <= n <= lines_read for n, _ in lines)
        if not files._utf16_without_bom(data):         # UTF-16's lines are counted in the decoded text
            assert lines_read == _lines_in(data)
    finally:
        path.unlink()


METRIC_LINES = ["# TYPE vllm:num_requests_running gauge", "vllm:num_requests_running{model_name=\"m\"} 3.0",
                "vllm:num_preemptions_total{engine=\"0\"} 12", "vllm:kv_cache_usage_perc 0.5", "# HELP x y", "",
                "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1.0"]


@FAST
@given(st.lists(st.one_of(st.sampled_from(METRIC_LINES), st.text(max_size=60)), max_size=20))
@example(["\x85", METRIC_LINES[1]])                # a character str.splitlines ends a line at; the format does not
def test_metrics_parser_parses_or_names_the_line(lines):
    text = "\n".join(lines) + "\n"
    try:
        samples = parse_exposition(text, "m.prom")
    except InputError as err:
        assert str(err).startswith("m.prom:") and "\n" not in str(err)
        return
    physical = text.split("\n")[:-1]
    for s in samples:
        assert 0 <= s.source.line <= len(physical)
        assert s.source.line == 0 or s.source.text == physical[s.source.line - 1]


FAMILY_NAMES = ["vllm:num_preemptions", "vllm:num_preemptions_total", "vllm:e2e_request_latency_seconds",
                "process_start_time_seconds", "x"]
SAMPLE_SUFFIXES = ["", "_total", "_bucket", "_count", "_sum", "_created"]
LABEL_PAIRS = ['engine="0"', 'le="+Inf"', 'le="0.5"', 'model_name="Qwen/Qwen3-8B"', 'a=""', '_x="b,c}"', 'v="ü 1"']
VALUES = ["0", "12", "3.5", "1e3", "-0.0", "007", "12345678901234567890"]
ODD_VALUES = ["NaN", "+Inf", "-Inf", "1e999", "1_0", "0x1", ""]


@st.composite
def exposition_line(draw, name: str) -> str:
    """A line a client library writes for family `name`, or now and then one of its near misses (a tab, a
    doubled space, a type prometheus-client does not know, an escape, an exemplar, a repeated label, ...)."""
    kind = draw(st.integers(0, 99))
    if kind <= 19:
        return f"# TYPE {name} {draw(st.sampled_from(['counter', 'counter', 'gauge', 'histogram', 'untyped']))}"
    if kind == 20:
        return draw(st.sampled_from([f"# TYPE {name} info", f"# TYPE {name} coun", f"# TYPE {name}",
                                     f"# TYPE {name} counter x", f"# TYPE  {name} gauge", f"# TYPE {name} summary"]))
    if kind <= 25:
        return draw(st.sampled_from([f"# HELP {name} what it counts", f"# HELP {name}", "#", "# a comment", ""]))
    if kind == 26:
        return draw(st.sampled_from(['# "quoted"', "#HELP x", "# HELP\tx y", "# TYPE\tx counter"]))
    if kind == 27:
        return draw(st.text(max_size=40))
    odd = kind == 28
    sample = name + draw(st.sampled_from(SAMPLE_SUFFIXES[:1] * 3 + SAMPLE_SUFFIXES))
    label_pool = LABEL_PAIRS + (['e="a\\"b"', 'e="\\n"', '__name__="x"', 'engine="1"'] if odd else [])
    pairs = draw(st.lists(st.sampled_from(label_pool), max_size=3, unique=not odd))
    labels = "{" + ",".join(pairs) + "}" if pairs or (odd and draw(st.booleans())) else ""
    separator = draw(st.sampled_from(["  ", "\t", ""])) if odd else " "
    line = sample + labels + separator + draw(st.sampled_from(ODD_VALUES if odd else VALUES))
    if draw(st.booleans()):
        line += draw(st.sampled_from([" -5", " 1 2", ' # {a="b"} 1'] if odd else [" 1700000000000", " 17e11"]))
    return draw(st.sampled_from(["", "", " ", "\t"])) + line


@st.composite
def exposition(draw) -> list[str]:
    """Families of a few lines each, as an exposition groups them, with strays between."""
    lines: list[str] = []
    for name in draw(st.lists(st.sampled_from(FAMILY_NAMES), max_size=6)):
        lines.extend(draw(st.lists(exposition_line(name), max_size=5)))
    return lines


def _as_read(samples):
    return [(s.name, dict(s.labels), s.value, s.time, s.source) for s in samples]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exposition())
@example(["# HELP x", "x 1", "# TYPE x counter"])              # a type after the family's samples renames them
@example(["# TYPE y counter", "# HELP\tx y", "y 1"])             # a HELP line with a tab starts a family too
@example(["# TYPE x counter", "y 1", "x 2"])                    # a stray sample ends the family
@example(["# TYPE x histogram", "x_bucket 1", "# TYPE x counter"])  # ... and a histogram's buckets are its own
def test_plain_lines_are_read_as_prometheus_client_reads_them(lines):
    """The regex path gives the samples prometheus-client gives, or leaves the exposition to it."""
    numbered = [line + "\n" for line in lines]
    plain = parse_plain_lines(numbered, "m.prom", 0, 5.0, SeriesCache())
    try:
        client = parse_with_client(numbered, "m.prom", 0, 5.0, {})
    except InputError:
        assert plain is None
        return
    if plain is not None:
        assert _as_read(plain) == _as_read(client)


def test_the_plain_path_reads_what_client_libraries_write():
    """vLLM's and dcgm-exporter's own lines never need prometheus-client's parser, counters without
    `_total` and timestamps included; a tab, an escape or too many samples hand the text to it."""
    text = ["# HELP vllm:num_preemptions Preemptions.", "# TYPE vllm:num_preemptions counter",
            'vllm:num_preemptions{engine="0",model_name="m"} 4', "# TYPE vllm:e2e histogram",
            'vllm:e2e_bucket{le="+Inf"} 7.0 1700000000000', "vllm:e2e_count 7.0", 'DCGM_FI_DEV_FB_USED{gpu="0"} 70000']
    plain = parse_plain_lines([line + "\n" for line in text], "m.prom", 0, None, SeriesCache())
    assert plain is not None
    assert [(s.name, s.value, s.time, s.source.line) for s in plain] == [
        ("vllm:num_preemptions_total", 4.0, None, 3), ("vllm:e2e_bucket", 7.0, 1700000000.0, 5),
        ("vllm:e2e_count", 7.0, None, 6), ("DCGM_FI_DEV_FB_USED", 70000.0, None, 7)]
    for other in ["vllm:e2e_count\t7", 'vllm:e2e_count{e="a\\"b"} 7', "vllm:e2e_count 7 # {a=\"b\"} 1"]:
        assert parse_plain_lines([other + "\n"], "m.prom", 0, None, SeriesCache()) is None
    assert parse_plain_lines([f"x {i}\n" for i in range(MAX_SERIES + 1)], "m.prom", 0, None, SeriesCache()) is None


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


# --- the fast paths give exactly what their slow, obvious forms give ---------------------------------

ANCHORS = list(KIT.signatures._by_anchor)
LEVEL_BITS = ["INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL", " ", "(", ")", "pid=3", "x", " 01-02 03:04:05 ",
              "(APIServer pid=1)", "|"]


@st.composite
def anchor_soup(draw) -> str:
    """Text made of anchors, their pieces and glue, so anchors overlap, nest and touch."""
    parts = draw(st.lists(st.one_of(st.sampled_from(ANCHORS),
                                    st.sampled_from(ANCHORS).map(lambda a: a[len(a) // 2:]),
                                    st.sampled_from(ANCHORS).map(lambda a: a[:len(a) // 2]),
                                    st.text(alphabet=" :=_-.(ea", max_size=3)), max_size=8))
    return "".join(parts)


def _match_agrees_with_a_plain_scan(message: str) -> None:
    slow = sorted(((sig.id, got[0], got[1]) for anchor, sigs in KIT.signatures._by_anchor.items() if anchor in message
                   for sig in sigs if (got := KIT.signatures.extract(sig, message)) is not None), key=str)
    if len(slow) > 1:               # match() keeps the specific hits when there are several
        slow = [h for h in slow if not KIT.signatures.by_id[h[0]].catch_all] or slow
    fast = sorted(((sig.id, fields, span) for sig, fields, span in KIT.signatures.match(message)), key=str)
    assert fast == slow, message


@FAST
@given(anchor_soup())
def test_signature_matching_finds_every_anchor_a_plain_scan_finds(message):
    _match_agrees_with_a_plain_scan(message)


def test_an_anchor_inside_or_overlapping_another_is_still_found():
    """The one-pass finder skips an anchor that starts inside one it found; every such pair is checked."""
    pairs = 0
    for a in ANCHORS:
        for b in ANCHORS:
            if a == b:
                continue
            if b in a:
                _match_agrees_with_a_plain_scan(a)
                pairs += 1
            for k in range(1, min(len(a), len(b))):
                if a.endswith(b[:k]):
                    _match_agrees_with_a_plain_scan(a + b[k:])
                    _match_agrees_with_a_plain_scan("x " + a + b[k:] + " y")
                    pairs += 1
    assert pairs > 50


@st.composite
def glued_records(draw) -> str:
    """Records run together as tqdm and crashed writers leave them: glue, process groups, level, date."""
    out = ""
    for _ in range(draw(st.integers(1, 4))):
        out += draw(st.sampled_from(["", " ", "x", "|", ")", "100%|###|"]))
        for _ in range(draw(st.integers(0, 2))):
            out += draw(st.sampled_from(["(APIServer pid=1)", "(VllmWorker rank=0 pid=3)", "(x)"]))
            out += draw(st.sampled_from(["", " "]))
        out += draw(st.sampled_from(["INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL", "INF"]))
        out += draw(st.sampled_from([" 01-02 03:04:05 ", " 01-02 03:04:05,", " 1-2 ", ""])) + "msg"
    return out


@FAST
@given(st.one_of(glued_records(), st.lists(st.sampled_from(LEVEL_BITS), max_size=12).map("".join)))
@example("x(APIServer pid=1) INFO 01-02 03:04:05 msg")
@example("100%|###|INFO 01-02 03:04:05 msg")
def test_glue_precheck_never_hides_a_split(piece):
    from triage.logs.envelope import _GLUED, _may_hold_glued_record
    if len([p for p in _GLUED.split(piece) if p]) > 1:
        assert _may_hold_glued_record(piece)


BULK_BITS = [a.decode() for group in KIT.signatures.bulk_anchors for a in group]


@st.composite
def near_bulk_line(draw) -> str:
    """A line with bulk anchors, their pieces and near misses around the head window's edge."""
    anchor = draw(st.sampled_from(BULK_BITS))
    cut = draw(st.integers(0, len(anchor)))
    piece = draw(st.sampled_from([anchor, anchor[:cut], anchor[cut:], anchor[:cut] + "x" + anchor[cut:]]))
    pad = draw(st.integers(0, 260)) if draw(st.booleans()) else 240 - len(piece) + draw(st.integers(-2, 2))
    return "y" * max(0, pad) + piece + draw(st.text(max_size=10))


@FAST
@given(st.lists(st.one_of(st.sampled_from(SAMPLES), st.text(max_size=300), near_bulk_line(),
                          st.sampled_from(["", "x" * 300 + "Received request r1: prompt: 'a'"])), max_size=30),
       st.booleans())
def test_block_split_is_a_per_line_search_of_each_head(lines, last_newline):
    from triage.sources.scan import HEAD_WINDOW, split_block
    patterns = KIT.signatures.bulk_patterns
    raw = [line.encode("utf-8", "replace").replace(b"\n", b" ") for line in lines]
    block = b"\n".join(raw) + (b"\n" if raw and last_newline else b"")
    raw = block.split(b"\n")[:-1] if block.endswith(b"\n") or not block else block.split(b"\n")
    numbers, kept, count, tally = split_block(block, patterns, 10)
    expect_kept, expect_tally = [], [0] * len(patterns)
    for i, line in enumerate(raw):
        claimed = next((k for k, group in enumerate(KIT.signatures.bulk_anchors)
                        if any(anchor in line[:HEAD_WINDOW] for anchor in group)), None)
        if claimed is not None:
            expect_tally[claimed] += 1
        elif line:
            expect_kept.append((10 + i, line))
    assert (list(zip(numbers, kept)), count, tally) == (expect_kept, len(raw), expect_tally)


@FAST
@given(st.lists(st.text(alphabet=st.sampled_from("09a.%\n\u0663\u00e9"), max_size=12), max_size=8))
def test_a_lines_digit_form_reads_each_ascii_digit_as_zero(lines):
    """Text that is all ASCII (newlines in it too): each ASCII digit read as 0, nothing else touched; text that is not
    ASCII has no digit form (an Arabic-Indic digit is no ASCII digit)."""
    zeroed = [bytes(48 if 48 <= b <= 57 else b for b in line.encode()) for line in lines]
    assert scan.digit_forms(lines) == (zeroed if all(line.isascii() for line in lines) else None)


# Numbers as vLLM prints them, and ones it never does (several dots, other scripts' digits, huge).
NUMBERS = st.one_of(st.integers(0, 10**6).map(str), st.floats(0, 1e5).map(lambda f: f"{f:.1f}"),
                    st.sampled_from(["0", "1.2.3", ".", "00", "٣", "9" * 5000, "1e5", "-1", "",
                                     "9" * 15, "9" * 16, "1" + "0" * 15, "99999.9", "999999.", "9999999.9"]))


@st.composite
def stats_message(draw) -> str:
    """A stats line's message, V1 or V0, as vLLM prints it or slightly off, maybe with another anchor."""
    n = lambda: draw(NUMBERS)  # noqa: E731
    if draw(st.booleans()):
        head = draw(st.sampled_from([f"Engine {n()}: ", f"{n()} Engines Aggregated: ", "", "Engine x: "]))
        text = (f"{head}Avg prompt throughput: {n()} tokens/s, Avg generation throughput: {n()} tokens/s, "
                f"Running: {n()} reqs, Waiting: {n()} reqs, ")
        if draw(st.booleans()):
            text += f"Preemptions: {n()}, "
        text += draw(st.sampled_from(["GPU KV cache usage: ", "KV cache usage: ", "GPU KV cache usage:"])) + n() + "%"
        if draw(st.booleans()):
            text += f", Prefix cache hit rate: {n()}%"
    else:
        text = (f"Avg prompt throughput: {n()} tokens/s, Avg generation throughput: {n()} tokens/s, Running: {n()} "
                f"reqs, Swapped: {n()} reqs, Pending: {n()} reqs")
        if draw(st.booleans()):
            text += f", GPU KV cache usage: {n()}%, CPU KV cache usage: {n()}%"
    text += draw(st.sampled_from(["", ".", "..", " ", "x", "%"]))
    if draw(st.integers(0, 4)) == 0:
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.sampled_from(ANCHORS)) + text[cut:]
    return text


@FAST
@given(stats_message())
@example("Engine 000: Avg prompt throughput: 9999999999999999 tokens/s, Avg generation throughput: 1000000000000000 "
         "tokens/s, Running: 9999999999999999 reqs, Waiting: 999999999999999 reqs, GPU KV cache usage: 9999999%, "
         "Prefix cache hit rate: 999999.%")
@example("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.2.3 tokens/s, Running: 1000000000000000 "
         "reqs, Swapped: 0 reqs, Pending: 9999999999999999 reqs, GPU KV cache usage: 99999.9%, CPU KV cache usage: "
         "1000000.%")
def test_stats_shapes_give_what_the_signatures_give(message):
    """The range limits hold on the shapes' short conversions too (numbers at the edge of each one)."""
    _match_agrees_with_a_plain_scan(message)


def test_stats_shapes_are_used_with_the_bundled_signatures():
    """The fast path is on for the signatures vtriage ships (a change to them must keep it on, or say why)."""
    shapes = KIT.signatures._shapes["Avg prompt throughput: "]
    for sig in ("stats_v0", "stats_v1"):
        message = next(records([(1, KIT.signatures.by_id[sig].samples[0])])).message
        assert any(shape.match(message) for shape, *_ in shapes), sig


@st.composite
def prefixed_line(draw) -> str:
    """A line of vLLM's usual shape, or close to it: process groups, rank, level, time, file, message."""
    groups = draw(st.lists(st.sampled_from(["(APIServer pid=1) ", "(EngineCore_DP0 pid=7) ", "( pid=3)",
                                            "(VllmWorker rank=0 pid=3, ip=10.0.0.1) ", "(x pid=1)", "[rank0]: ",
                                            "(a(b) pid=2) ", "(Worker pid=x) "]), max_size=2))
    level = draw(st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "INFO:", "info"]))
    when = draw(st.sampled_from([" 01-02 03:04:05 ", " 01-02 03:04:05.123 ", " 1-02 03:04:05 ", " 01-02 03:04:05,9 "]))
    where = draw(st.sampled_from(["[core.py:12] ", "core.py:12] ", "[v1/engine/core.py:7]", "[1m.py:3] ",
                                  "[a b.py:1] ", "[x.py:y] "]))
    message = draw(st.one_of(st.text(max_size=60), glued_records(), st.sampled_from(SAMPLES),
                             st.lists(st.sampled_from(LEVEL_BITS + ["\x1b[0m", "^[[0;36m", "[36m", "\r", "{", "|",
                                                                     "2025-07-07T15:19:48Z "]),
                                      max_size=8).map("".join)))
    return "".join(groups) + level + when + where + message


@FAST
@given(prefixed_line())
@example("(APIServer pid=1) INFO 01-02 03:04:05 [core.py:1] text\r more")
@example("(x pid=1)(y pid=2) INFO 01-02 03:04:05 [core.py:1] text")
@example("INFO 01-02 03:04:05 [core.py:1] a\x1b[0m")
def test_plain_records_are_what_the_full_envelope_gives(line):
    from triage.logs import envelope
    fast = envelope.plain_record(9, line)
    if fast is None:
        return
    slow = _read_the_full_way(envelope, [(9, line)])
    assert slow == [fast]


@FAST
@given(st.lists(st.sampled_from(["\x1b", "^[", "\\", "\\e", "\\033", "\\x1b", "\\u001b", "[", "]", "0", "36", ";",
                                 "1;32", "m", "K", "?", "\x07", "x", " ", "[core.py:12]"]), max_size=10).map("".join))
@example("INFO 01-02 03:04:05 [core.py:1] a[0m")
@example("a\\e[1mb")
@example("a\\e[Kb \\033[?25l")
@example("\x1b]0;title\x07 x")
def test_the_ansi_precheck_answers_as_the_full_pattern(text):
    """plain_record asks the cheap form; it must agree with the full escape-code pattern everywhere."""
    from triage.logs import envelope
    assert envelope._holds_ansi(text) == (envelope._ANSI.search(text) is not None)


@FAST
@given(st.one_of(anchor_soup(), stats_message(), st.text(max_size=80)))
def test_anchors_are_found_the_same_without_the_aho_corasick_wheel(message):
    """Where ahocorasick-rs has no wheel, the regex trie finds the same anchors."""
    from triage.logs import signatures
    plain = {a for a in ANCHORS if a in message}
    assert KIT.signatures.anchors_in(message) == plain
    automaton, KIT.signatures._automaton = KIT.signatures._automaton, None
    try:
        assert KIT.signatures.anchors_in(message) == plain
    finally:
        KIT.signatures._automaton = automaton
    assert signatures.ahocorasick_rs is None or automaton is not None


QUIET_LIKE = ["(EngineCore_DP0 pid=311) DEBUG 11-29 21:02:46 [v1/engine/core.py:745] EngineCore loop active.",
              "(APIServer pid=1) DEBUG 11-29 21:02:46 [v1/engine/async_llm.py:743] Called check_health.",
              "DEBUG 11-29 21:02:46 [x.py:1] plain V1 without a process", "INFO 01-02 03:04:05 core.py:12] V0 plain",
              "(VllmWorker rank=0 pid=3, ip=10.0.0.1) INFO 01-02 03:04:05.123 [w.py:9] rank line",
              "(APIServer pid=1) INFO 11-29 21:02:46 [1m.py:3] an escape code's bare form",
              "(APIServer pid=1) DEBUG 11-29 21:02:46 [x.py:1]   indented message",
              "(APIServer pid=1) DEBUG 11-29 21:02:46 [x.py:1] ^^^^", "(x(y) pid=1) DEBUG 01-02 03:04:05 [a.py:1] m",
              "(pid=1) DEBUG 01-02 03:04:05 [a.py:1] m", "(a pid=1 pid=2) DEBUG 01-02 03:04:05 [a.py:1] m",
              "(APIServer pid=1) WARNING 11-29 21:02:46 [x.py:1] an odd warning", "ERROR 01-02 03:04:05 [a.py:1] bad",
              "(APIServer pid=1) info 11-29 21:02:46 [x.py:1] lower case",
              "(APIServer pid=1) DEBUG 1-29 21:02:46 [x.py:1] m"]
QUIET_BULK = ("(APIServer pid=1) INFO 09-30 10:05:00 [logger.py:49] Received request chatcmpl-3b5d9f: prompt: 'Hello', "
              "params: SamplingParams(n=1), lora_request: None.")      # set aside by the bulk anchors, never received
QUIET_NOISE = ["", "continued tail of a wrapped line", "  indented tail", "\x1b[0m", "\r", "\x00", "INFO",
               "(APIServer pid=1) ", "Engine 000: Avg prompt throughput: 1.0 tokens/s", " across cluster]",
               "2025-07-07T15:19:48.123Z stdout P ", "2025-07-07T15:19:48.123Z stdout F ", "{\"log\": \"x\"}"]


@st.composite
def quiet_or_not(draw) -> str:
    """Lines around the quiet shape: quiet ones, near misses, wrapped tails, split and wrapped records."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.sampled_from(QUIET_LIKE))
    if kind == 1:
        return draw(st.sampled_from(QUIET_LIKE)) + draw(st.sampled_from(QUIET_NOISE))
    if kind == 2:
        return draw(st.sampled_from(QUIET_NOISE)) + draw(st.sampled_from(QUIET_LIKE))
    if kind == 3:
        return draw(prefixed_line())
    return draw(st.one_of(st.sampled_from(QUIET_NOISE), st.sampled_from(SAMPLES), st.just(QUIET_BULK)))


def _read_with(path: Path, quiet) -> tuple[list, tuple, int]:
    reader = LineReader(open_log(str(path)), KIT.signatures.bulk_patterns, None, quiet)
    parse = LogParse(path.name, reader, KIT.signatures, Redactor())
    events = list(parse)
    result, lines = parse.result(), reader.result()
    summary = result.summary
    return events, (summary.lines_recognised, summary.vllm_lines + lines.quiet_lines, lines.lines_read,
                    result.unrecognised, lines.bulk_lines), lines.quiet_lines


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(quiet_or_not(), max_size=30).map("\n".join))
@example("\n".join(QUIET_LIKE[:3] * 3))
@example("\n".join([QUIET_LIKE[0], "2025-07-07T15:19:48.123Z stdout P " + QUIET_LIKE[1], QUIET_LIKE[0],
                    "(APIServer pid=1) INFO 11-29 21:33:25 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 "
                    "tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache "
                    "usage: 4.0%, Prefix cache hit rate: 0.0%", QUIET_LIKE[0]]))   # a collector's split line ends next
@example("\n".join(["2025-07-07T15:19:48.123Z stdout P " + QUIET_LIKE[0], QUIET_BULK, QUIET_LIKE[0], QUIET_BULK,
                    "(APIServer pid=1) WARNING 11-29 21:02:46 [x.py:1] an odd warning"]))  # a split line, bulk between
@example("\n".join([QUIET_LIKE[0], QUIET_LIKE[1] + " and then the allocator said Cuda failure out of me",
                    "mory at step 3", QUIET_LIKE[0]]))      # a terminal's wrap: the anchor spans the break
def test_quiet_lines_set_aside_give_what_parsing_them_gives(text):
    """The reader may set DEBUG and INFO lines aside unparsed only where parsing them finds nothing: the same
    events, coverage and unrecognised groups. (Inside a traceback the two differ by design: a set-aside line does
    not end it, as a bulk line does not; such logs are left out.)"""
    path = _file(text.encode())
    try:
        try:
            slow_events, slow_summary, none_aside = _read_with(path, None)
        except InputError:              # a NUL-heavy text reads as binary: refused either way
            assume(False)
        assume(not any(e.kind in ("traceback_start", "traceback_frame") for e in slow_events))
        fast_events, fast_summary, _ = _read_with(path, KIT.signatures.quiet)
        assert none_aside == 0
        assert fast_events == slow_events
        assert fast_summary == slow_summary
    finally:
        path.unlink()


QUIET_WITH_A_STOP = st.sampled_from(QUIET_LIKE).map(lambda line: line + ' "GET / HTTP/1.1" 200')   # a stop with digits
QUIET_WITH_A_BRACKET = st.tuples(st.sampled_from(QUIET_LIKE), st.integers(0, 80), st.sampled_from(["]", "] ", "]x"])) \
    .map(lambda t: t[0][:t[1]] + t[2] + t[0][t[1]:])


def _with_digit_variants(lines: list[str], rnd) -> list[bytes]:
    """Each line as drawn, then with its digits replaced at random: the same digit form."""
    raw = []
    for line in lines:
        drawn = line.encode("utf-8", "replace").replace(b"\n", b" ")
        raw += [drawn, bytes(rnd.choice(b"0123456789") if byte in b"0123456789" else byte for byte in drawn)]
    return raw


def _split(lines: list[bytes]) -> scan.SplitBlock:
    """A block of `lines` split as the reader splits it, quiet lines set aside."""
    return scan.split_block(b"\n".join(lines) + b"\n", KIT.signatures.bulk_patterns, 1, KIT.signatures.quiet)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(quiet_or_not(), QUIET_WITH_A_STOP, QUIET_WITH_A_BRACKET,
                          st.sampled_from(QUIET_LIKE).map(lambda line: line + " [3 of 4]")), max_size=20),
       st.randoms(use_true_random=False))
def test_quiet_verdicts_by_digit_form_are_each_lines_own(lines, rnd):
    """The quiet-line search asks once per digit form, matches the prefix once per form of the line's start, and
    looks for the stops in a block's messages at once (sources/scan.py): its answers are each line's own, for
    lines that differ only in their digits, where a stop holds digits (` HTTP/1.1" `, `[3`), and with a `]`
    anywhere."""
    from triage.sources import scan
    quiet = KIT.signatures.quiet
    assume(quiet is not None)
    raw = _with_digit_variants(lines, rnd)

    def alone(line: bytes) -> tuple[bool, bool]:
        """(has the prefix, is quiet but for its neighbours), asked of the line alone."""
        m = quiet.head.match(line)
        if m is None:
            return False, False
        return True, len(line) <= scan.QUIET_MAX_BYTES and not any(stop in line[m.end():] for stop in quiet.stops)
    assert quiet._verdicts(raw) == list(map(alone, raw))


def test_a_stop_holding_digits_has_the_quiet_lines_asked_each_alone():
    """Two lines that differ only in their digits share a digit form, but only one holds the stop `CUDA graphs can
    take additional 1~3 GiB memory per GPU`: every line is then asked alone, and the other is quiet."""
    quiet = KIT.signatures.quiet
    if quiet is None:
        pytest.skip("the Aho-Corasick wheel is not here")
    line = QUIET_LIKE[0].encode()
    lines = [line, line + b" CUDA graphs can take additional 1~3 GiB memory per GPU", line,
             line + b" CUDA graphs can take additional 2~4 GiB memory per GPU", line]
    split = _split(lines)       # the block's first and last lines have no neighbour: parsed
    assert (split.numbers, split.tally[-1]) == ([1, 2, 5], 2)


def test_the_stops_are_searched_in_each_message_alone_though_joined():
    """The messages of a block are searched for the stops joined by newlines: a match is its own message's, and a
    stop holding a newline (a hand-edited anchor) matches none, as it matches no line asked alone."""
    from triage.sources import scan
    if not scan.quiet_lines_possible():
        pytest.skip("the Aho-Corasick wheel is not installed")
    messages = [b"EngineCore loop active.", b"ab", b"c", b"", b"pid=3 glued"]
    assert scan._holding_any(messages, (b"b\nc", b"pid=", b"loop")) == [True, False, False, False, True]
    assert scan._holding_any(messages, (b"c",)) == [True, False, True, False, False]
    assert scan._holding_any([], (b"c",)) == []


def test_the_usual_debug_lines_are_set_aside_and_the_rest_parsed(tmp_path):
    """On a DEBUG log the quiet lines are what the reader sets aside; a stats line, a WARNING, the lines next
    to a wrapped tail, a WARNING or an empty line and the block's first and last lines are parsed."""
    stats = ("(APIServer pid=1) INFO 11-29 21:33:25 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
             "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.0%, "
             "Prefix cache hit rate: 0.0%")
    lines = [QUIET_LIKE[0], QUIET_LIKE[1], QUIET_LIKE[0], stats,
             "(APIServer pid=1) WARNING 11-29 21:02:46 [x.py:1] something odd", QUIET_LIKE[1], QUIET_LIKE[0],
             "a wrapped tail", QUIET_LIKE[0], QUIET_LIKE[1], QUIET_LIKE[0], QUIET_LIKE[1], "", QUIET_LIKE[0],
             QUIET_LIKE[1], QUIET_LIKE[0]]
    path = tmp_path / "debug.log"
    path.write_text("\n".join(lines) + "\n")
    reader = LineReader(open_log(str(path)), KIT.signatures.bulk_patterns, None, KIT.signatures.quiet)
    assert [n for n, _ in reader] == [1, 4, 5, 6, 7, 8, 9, 12, 14, 16]
    assert reader.result().quiet_lines == 5


# --- runs of stats lines folded before they are parsed (logs/statsrun.py) ---------------------------

STATS_NAMES = ["APIServer", "EngineCore_DP0", "hf_AbCdEfGh1234", "sk-abcdefghijklmnop", "xINFO", "a--key", "token",
               "key.pass", "INFO", "_", "Worker_TP0"]
STATS_FILES = ["loggers.py", "v1/metrics/loggers.py", "metrics.py", "key.py", "sk-abcdefghijklmnopqrstu.py", "x",
               "passwd/a.py", "Avg.py"]
STATS_OTHER = ["(APIServer pid=1) INFO 11-29 21:03:26 [api_server.py:1] Started server process",
               "(APIServer pid=1) WARNING 11-29 21:03:26 [scheduler.py:1] Sequence group 0 is preempted by "
               "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. total_num_cumulative_"
               "preemption=1", "a wrapped tail of the line before", "  indented tail",
               "2025-07-07T15:19:48.123Z stdout P (APIServer pid=1) INFO 11-29 21:03:25 [loggers.py:123] Engine 0",
               "Traceback (most recent call last):", "(APIServer pid=1) ERROR 11-29 21:03:27 [core.py:1] boom",
               "", "(APIServer pid=1) INFO 11-29 21:03:28 [api_server.py:1885] vLLM API server version 0.10.2",
               "(EngineCore_DP0 pid=9) INFO 11-29 21:03:29 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with "
               "config: model='m'"]


@st.composite
def stats_run(draw) -> list[str]:
    """A run of whole stats lines as vLLM prints them (V1 or V0, one process), with numbers the converters refuse
    now and then, and process names and files that redaction, level words or anchors may trip on."""
    name = draw(st.sampled_from(["APIServer"] * 4 + STATS_NAMES))
    process = draw(st.sampled_from([f"({name} pid=1) "] * 3 + ["(pid=12) ", ""]))
    where = draw(st.sampled_from(["loggers.py"] * 4 + STATS_FILES)) + ":" + draw(st.sampled_from(["123", "7"]))
    v1, preempting = draw(st.booleans()), draw(st.booleans())
    lines = []
    for _ in range(draw(st.integers(1, 12))):
        odd = draw(st.integers(0, 9)) == 0         # now and then a number vLLM never prints
        ints = NUMBERS if odd else st.integers(0, 300).map(str)
        floats = NUMBERS if odd else st.sampled_from(["0.0", "95.0", "99.9", "100.0", "3.5"])
        i = lambda strategy=ints: draw(strategy)  # noqa: E731
        f = lambda strategy=floats: draw(strategy)  # noqa: E731
        when = f"11-{draw(st.integers(10, 30))} 21:{draw(st.integers(10, 59))}:{draw(st.integers(10, 59))}"
        if v1:
            text = (f"{process}INFO {when} [{where}] Engine {i()}: Avg prompt throughput: {f()} tokens/s, Avg "
                    f"generation throughput: {f()} tokens/s, Running: {i()} reqs, Waiting: {i()} reqs, ")
            if preempting and draw(st.integers(0, 5)):
                text += f"Preemptions: {i()}, "
            text += f"GPU KV cache usage: {f()}%, Prefix cache hit rate: {f()}%"
        else:
            text = (f"{process}INFO {when} {where}] Avg prompt throughput: {f()} tokens/s, Avg generation throughput: "
                    f"{f()} tokens/s, Running: {i()} reqs, Swapped: {i()} reqs, Pending: {i()} reqs, GPU KV cache "
                    f"usage: {f()}%, CPU KV cache usage: {f()}%" + draw(st.sampled_from(["", ".", ".."])))
        if draw(st.integers(0, 15)) == 0:
            text += draw(st.sampled_from(["x", " across cluster]", "\r", "\x1b[0m", " api_key=sk-abcdefghijklmnop"]))
        lines.append(text)
    return lines


@st.composite
def stats_log(draw) -> list[tuple[int, str]]:
    """Numbered lines: runs of stats lines, other lines between them, gaps (lines the reader set aside)."""
    lines, number = [], 0
    for _ in range(draw(st.integers(1, 8))):
        run = draw(stats_run()) if draw(st.integers(0, 3)) else [draw(st.sampled_from(STATS_OTHER))]
        for line in run:
            number += draw(st.sampled_from([1, 1, 1, 1, 2, 7]))
            lines.append((number, line))
    return lines


_STATS_LINE = ("(APIServer pid=1) INFO 11-29 21:03:25 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 "
               "tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache "
               "usage: 4.0%, Prefix cache hit rate: 0.0%")


def _parsed(lines, fold: bool) -> tuple[list, object]:
    parse = LogParse("t.log", list(lines), KIT.signatures, Redactor(), fold_stats=fold)
    events = list(parse)
    return events, parse.result()


@pytest.mark.parametrize("cap", [2, 10_000], ids=["runs", "alone"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stats_log(), st.sampled_from([1, 2, 3, 5, 4096]))
@example([(1, "(APIServer pid=1) INFO 11-29 21:03:25 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
              "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 96.0%, "
              "Prefix cache hit rate: 0.0%")] * 1 +
         [(n, "(APIServer pid=1) INFO 11-29 21:03:25 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 "
              f"tokens/s, Avg generation throughput: 2.0 tokens/s, Running: {n} reqs, Waiting: {n % 2} reqs, "
              f"Preemptions: {n % 3}, GPU KV cache usage: {90 + n % 7}.0%, Prefix cache hit rate: 0.0%")
          for n in range(2, 80)], 5)
@example([(n, _STATS_LINE) for n in range(1, 5)] + [(5, "t" * len(_STATS_LINE))], 2)   # a pager's wrap at its width
@example([(n, f"INFO 08-06 10:12:{n:02d} metrics.py:351] Avg prompt throughput: 1.0 tokens/s, Avg generation "
              f"throughput: 2.0 tokens/s, Running: 9 reqs, Swapped: {n % 2} reqs, Pending: 0 reqs, GPU KV cache usage: "
              "99.0%, CPU KV cache usage: 1.0%.") for n in range(1, 9)], 4096)    # V0: swapped out, none pending, full
@example([(n, f"INFO 08-06 10:12:{n:02d} metrics.py:351] Avg prompt throughput: 1.0 tokens/s, Avg generation "
              f"throughput: 2.0 tokens/s, Running: {'9' * 17 if n == 8 else n} reqs, Swapped: 0 reqs, Pending: 0 reqs, "
              f"GPU KV cache usage: {'9999999.9' if n == 5 else f'{90 + n}.0'}%, CPU KV cache usage: 1.0%.")
          for n in range(1, 9)], 4096)      # numbers out of range: the last line's Running, one line's KV usage
@example([(n, _STATS_LINE) for n in range(1, 5)] + [(5, STATS_OTHER[4]), (6, _STATS_LINE.replace("4.0%", "99.0%"))]
         + [(n, _STATS_LINE) for n in range(7, 13)], 3)   # a batch of stats lines after a collector's partial line
@example([(n, _STATS_LINE) for n in range(1, 11)] + [(11, STATS_OTHER[4]), (12, _STATS_LINE.replace("4.0%", "99.0%"))]
         + [(n, _STATS_LINE) for n in range(13, 21)], 8)   # ... and inside a batch, after a lone partial line
@example([(n, _STATS_LINE) for n in range(1, 11)] + [(11, STATS_OTHER[2]), (12, STATS_OTHER[3])]
         + [(n, _STATS_LINE) for n in range(14, 21)], 8)   # wrapped tails right after a stats line, then a gap
@example([(n, _STATS_LINE if n < 6 or n > 25 else STATS_OTHER[0]) for n in range(1, 41)], 4096)  # many others
@example([(n, _STATS_LINE.replace("1.0 tokens/s", ("1" * 400 if n == 6 else "1") + ".0 tokens/s")
               .replace("usage: 4.0%", "usage: 99.0%" if n == 6 else "usage: 4.0%")) for n in range(1, 13)],
         3)                                 # the fullest line too long to fold: evidence is cut at 600 characters
def test_folded_stats_runs_are_what_merging_the_parsed_lines_gives(cap, lines, batch):
    """Folding a run of stats lines gives the event merge_stats makes of the lines parsed one by one, and every
    other event, the coverage and the unrecognised lines as parsing them all does, however the lines are
    batched; a stats line read alone (before the cap) gives the parser's own event."""
    from functools import reduce
    from unittest import mock

    from triage.logs import parse as logparse
    from triage.logs import statsrun
    with mock.patch.object(logparse, "STATS_CAP", cap), mock.patch.object(statsrun, "BATCH_LINES", batch):
        slow, slow_result = _parsed(lines, False)      # fold from the third stats line on, not the 4,001st
        fast, fast_result = _parsed(lines, True)
    at = 0
    for event in fast:
        n = event.fields.get("intervals", 1) if event.kind == "stats" and "intervals" not in slow[at].fields else 1
        expected = reduce(logparse.merge_stats, slow[at:at + n])
        assert dataclasses.replace(event, seq=0) == dataclasses.replace(expected, seq=0), (at, n)
        at += n
    assert at == len(slow)
    assert [e.seq for e in fast] == list(range(len(fast)))
    assert fast_result == slow_result


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stats_log(), st.lists(st.integers(min_value=1, max_value=40), max_size=12), st.sampled_from([2, 3, 512]))
def test_the_fold_reads_the_same_however_the_reader_cuts_the_lines_into_blocks(lines, cuts, batch):
    """The reader hands the fold its lines a block at a time, of whatever size its pieces of the file hold: the
    runs and the lines passed on are the same as from one block."""
    from unittest import mock

    from triage.logs import parse as logparse
    from triage.logs import statsrun
    numbers, texts = [n for n, _ in lines], [t for _, t in lines]
    blocks, at = [], 0
    for size in cuts:
        if at < len(lines):
            blocks.append((numbers[at:at + size], texts[at:at + size]))
            at += size
    if at < len(lines):
        blocks.append((numbers[at:], texts[at:]))
    restarts = sorted({s.anchor for s in KIT.signatures.signatures if s.kind in logparse._RESTART_KINDS})
    with mock.patch.object(statsrun, "BATCH_LINES", batch):
        whole = list(statsrun.fold_runs([(numbers, texts)] if lines else [], KIT.signatures, Redactor(), "t.log", 2,
                                        restarts))
        cut = list(statsrun.fold_runs(blocks, KIT.signatures, Redactor(), "t.log", 2, restarts))
    assert cut == whole


def test_a_long_run_of_stats_lines_is_folded(tmp_path):
    """On a log of stats lines, past the first STATS_CAP every FOLD_LINES lines make one event."""
    from triage.logs.parse import STATS_CAP
    from triage.logs.statsrun import FOLD_LINES
    total = STATS_CAP + 10 * FOLD_LINES
    events = list(LogParse("s.log", [(n, _STATS_LINE) for n in range(1, total + 1)], KIT.signatures, Redactor()))
    assert len(events) == STATS_CAP + 10
    assert sum(e.fields.get("intervals", 1) for e in events) == total


_BANNER = "(APIServer pid=1) INFO 11-29 21:03:26 [api_server.py:1885] vLLM API server version 0.10.2"


@pytest.mark.parametrize("batch", [3, 5, 9, 12, 4096])
def test_the_stats_lines_after_a_restart_are_read_one_by_one_up_to_the_cap_again(batch):
    """The parser keeps an attempt's first STATS_CAP stats lines each as its own event, counted from the attempt's
    start: after a line that may start another attempt (a banner, the engine's config) the fold waits for as many
    again, however the lines are batched, also when the lines around the banner hold no stats line."""
    from unittest import mock

    from triage.logs import parse as logparse
    from triage.logs import statsrun
    others = [STATS_OTHER[0]] * 3 + [_BANNER] + [STATS_OTHER[0]] * 3
    lines = [(n, _STATS_LINE) for n in range(1, 11)] + [(n, text) for n, text in enumerate(others, start=11)] \
        + [(n, _STATS_LINE) for n in range(18, 30)]
    with mock.patch.object(logparse, "STATS_CAP", 2), mock.patch.object(statsrun, "BATCH_LINES", batch):
        fast, _ = _parsed(lines, True)
        slow, _ = _parsed(lines, False)
    after = [e for e in fast if e.kind == "stats" and e.source.line > 17]
    assert [e.source.line for e in after[:2]] == [18, 19] and not any("intervals" in e.fields for e in after[:2])
    assert sum(e.fields.get("intervals", 1) for e in after) == 12 and len(after) < 12      # the rest folded
    assert [dataclasses.replace(e, seq=0) for e in fast if e.kind != "stats"] == \
        [dataclasses.replace(e, seq=0) for e in slow if e.kind != "stats"]


def test_a_report_after_a_restart_is_the_one_of_every_line_read(monkeypatch):
    """A restart after more stats lines than the cap, and fewer after it: the new attempt's report (facts, timeline,
    fixes) is the one of reading every line one by one (the fold used to count a file's stats lines, not an
    attempt's, and folded the new attempt's 32 to an event)."""
    from triage.logs import parse as logparse
    monkeypatch.setattr(logparse, "STATS_CAP", 120)
    stats = [_STATS_LINE.replace("Running: 3", f"Running: {n % 50}").replace("usage: 4.0%", f"usage: {90 + n % 10}.0%")
             .replace("21:03:25", f"{21 + n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}") for n in range(250)]
    startup = [_BANNER, "(APIServer pid=1) INFO 11-29 21:00:01 [utils.py:328] non-default args: {'model': 'm'}"]
    text = "\n".join(startup + stats[:150] + startup + stats[150:]) + "\n"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "restart.log"
        path.write_text(text)
        folded = report_dict(build_report(Incident(logs=(open_log(str(path)),)), KIT))
        monkeypatch.setattr(logparse, "fold_runs", lambda blocks, *args: numbered_lines(blocks))
        every = report_dict(build_report(Incident(logs=(open_log(str(path)),)), KIT))
    assert len(folded["attempts"]) == 2 and len(folded["timeline"]) == 100
    assert folded == every


def _bundled_and_own_signatures(tmp_path, own_toml: str):
    """The bundled signatures with one file of the user's own beside them."""
    import shutil

    from triage.logs.signatures import load_signatures
    folder = tmp_path / "signatures"
    shutil.copytree(RULES_DIR / "signatures", folder)
    (folder / "own.toml").write_text(own_toml, encoding="utf-8")
    return load_signatures(folder)


def test_a_stats_line_holding_another_signatures_anchor_is_parsed_as_usual(tmp_path):
    """A signature of the user's own may be anchored inside a stats message: such lines are not folded, so that
    signature still sees every one of them."""
    from unittest import mock

    from triage.logs import parse as logparse
    signatures = _bundled_and_own_signatures(tmp_path, '''
[[signature]]
id = "queue_seen"
kind = "serving_progress"
anchor = "Waiting: "
regex = 'Waiting: (?P<waiting>\\d+) reqs'
source = "a test's own"
bands = { v1 = "Running: 3 reqs, Waiting: 0 reqs" }
fields = { waiting = "int" }
samples = ["Running: 3 reqs, Waiting: 0 reqs"]
''')
    lines = [(n, _STATS_LINE) for n in range(1, 9)]
    with mock.patch.object(logparse, "STATS_CAP", 2):
        folded = list(LogParse("t.log", lines, signatures, Redactor()))
        parsed = list(LogParse("t.log", lines, signatures, Redactor(), fold_stats=False))
    assert folded == parsed
    assert sum(e.signature == "queue_seen" for e in folded) == len(lines)


def test_an_anchor_with_digits_inside_stats_messages_is_looked_for_in_each_line(tmp_path):
    """Lines of one digit form share every answer but one: whether an anchor holding digits occurs. A signature
    of the user's own anchored on `Running: 3 reqs` still sees every line that says it, and only those."""
    from unittest import mock

    from triage.logs import parse as logparse
    signatures = _bundled_and_own_signatures(tmp_path, '''
[[signature]]
id = "three_running"
kind = "serving_progress"
anchor = "Running: 3 reqs"
regex = 'Running: 3 reqs'
source = "a test's own"
bands = { v1 = "Running: 3 reqs, Waiting: 0 reqs" }
samples = ["Running: 3 reqs, Waiting: 0 reqs"]
''')
    lines = [(n, _STATS_LINE.replace("Running: 3", f"Running: {3 + n % 2}")) for n in range(1, 13)]
    for batch in (1, 4, 128):
        with mock.patch.object(logparse, "STATS_CAP", 2), mock.patch("triage.logs.statsrun.BATCH_LINES", batch):
            folded = list(LogParse("t.log", lines, signatures, Redactor()))
            parsed = list(LogParse("t.log", lines, signatures, Redactor(), fold_stats=False))
        assert [e for e in folded if e.signature == "three_running"] == \
            [e for e in parsed if e.signature == "three_running"]
        assert sum(e.signature == "three_running" for e in folded) == 6


def test_a_stats_line_that_may_restart_starts_the_count_again(tmp_path):
    """A signature of the user's own that may start an attempt (a banner kind), anchored inside stats messages:
    each line holding it starts the parser's count again, so the lines between, fewer than the cap, stay unfolded."""
    from unittest import mock

    from triage.logs import parse as logparse
    between = _STATS_LINE.replace("Running: 3", "Running: 4")
    for anchor, holder in (("Running: 3 reqs", _STATS_LINE),                  # an anchor with digits, one without
                           ("Preemptions: ", between.replace("Waiting: 0 reqs", "Waiting: 0 reqs, Preemptions: 1"))):
        signatures = _bundled_and_own_signatures(tmp_path / anchor[0], f'''
[[signature]]
id = "own_banner"
kind = "version"
anchor = "{anchor}"
regex = '{anchor}'
source = "a test's own"
bands = {{ v1 = "{anchor}" }}
samples = ["{anchor}"]
''')
        lines = [(n, holder if n % 3 == 0 else between) for n in range(1, 31)]
        with mock.patch.object(logparse, "STATS_CAP", 2):
            folded = list(LogParse("t.log", lines, signatures, Redactor()))
            parsed = list(LogParse("t.log", lines, signatures, Redactor(), fold_stats=False))
        assert sum(e.signature == "own_banner" for e in parsed) == 10, anchor
        assert folded == parsed, anchor


@settings(max_examples=200, deadline=None)
@given(stats_run(), st.randoms(use_true_random=False))
def test_stats_shapes_read_every_digit_alike(lines, rnd):
    """The fold matches one line per digit form and slices the rest (logs/statsrun.py): that holds because the
    stats shapes treat every ASCII digit alike, so two lines that differ only in their digits match, or fail, at
    the same places."""
    for text in lines:
        other = "".join(rnd.choice("0123456789") if c in "0123456789" else c for c in text)
        for shape in KIT.signatures.stats_lines:
            mine, theirs = shape.line.match(text), shape.line.match(other)
            assert (mine is None) == (theirs is None)
            assert mine is None or mine.regs == theirs.regs


# --- a block's lines decoded in one step (sources/files.py) ------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")) |
                st.sampled_from([b"\xe2\x82", b"\xe2\x82\xac", b"\xff", b"a\r", b"\r", b"\x00x", b"\xf0\x9f\x98",
                                 b"\xed\xa0\x80", b"caf\xc3"]), min_size=1, max_size=8),
       st.sampled_from([0, 10]))
def test_a_block_decoded_at_once_reads_as_each_line_decoded(raws, base):
    """Decoding a block's lines joined gives each line's own decoding: invalid and cut UTF-8 at a line's end,
    NULs, carriage returns and lines cut for length included (those send the block line by line)."""
    from unittest import mock

    rest = [(i + 1, raw) for i, raw in enumerate(raws)]
    fast, slow = files._Reading("t", None, None, None, None, []), files._Reading("t", None, None, None, None, [])
    with mock.patch.object(files, "MAX_LINE_BYTES", 10):
        numbers, texts = files._decoded(list(range(1, len(raws) + 1)), raws, base, fast)
        assert list(zip(numbers, texts)) == [(base + n, files._decode(raw, base + n, slow)) for n, raw in rest]
    assert fast.cut_lines == slow.cut_lines


# --- redaction: what it says it leaves alone it leaves alone ----------------------------------------------------

_REDACTION_PIECES = ("prompt", "output", "Content", "prompt: ", "prompt='", "'hello world'", '"content": "hi"',
                     "prompt_token_ids: [1, 2, 3]", "prompt_ids=[", "]", "output_tokens", "vllm:prompt_tokens_total",
                     '{engine="0"} 12.0', "--api-key sk-abcdefghijklmnopqrstuvwxyz0123",
                     "token=hf_abcdefghijklmnop1234",
                     " ", "\n", "'", '"', ":", "=", "***")


@FAST
@given(st.lists(st.lists(st.sampled_from(_REDACTION_PIECES), max_size=8).map("".join), min_size=1, max_size=6),
       st.booleans())
def test_what_redaction_leaves_alone_it_gives_back_as_it_is(texts, prompts):
    """`leaves_alone` (which lets the metrics thinning drop a line, and the reports skip redacting it) never says
    so of a text redaction would change or count a mask in; asked of texts joined, it answers as for each."""
    redactor = Redactor(prompts=prompts)
    alone = [redactor.leaves_alone(text) for text in texts]
    assert redactor.leaves_alone_each(texts) == alone
    for text, untouched in zip(texts, alone):
        fresh = Redactor(prompts=prompts)
        if untouched:
            assert fresh.text(text) == text and not fresh.counts, text


# --- metrics thinning: counters and histograms thinned as snapshots arrive give the same report ---------------

_BOUNDS = ("0.5", "1.0", "+Inf")


@st.composite
def _series_history(draw, snapshots: int) -> list[float]:
    """A cumulative series over the snapshots: it rises, now and then restarts from a lower value."""
    values, value = [], draw(st.integers(0, 50))
    for _ in range(snapshots):
        value = draw(st.integers(0, 5)) if draw(st.integers(0, 6)) == 0 else value + draw(st.integers(0, 30))
        values.append(float(value))
    return values


@st.composite
def metric_snapshots(draw) -> list[str]:
    """Three to seven expositions of one server with one or two engines: gauges, the preemption counter and
    its _created (now and then missing from a snapshot), a token counter (sometimes not a whole number), a
    latency histogram with a float sum, a series missing from some snapshots, now and then a line redaction
    masks, and some expositions that only prometheus-client's parser reads."""
    count = draw(st.integers(3, 7))
    engines = draw(st.sampled_from([("0",), ("0", "1")]))
    texts = [[] for _ in range(count)]
    for engine in engines:
        labels = f'engine="{engine}",model_name="m"'
        secret = draw(st.sampled_from(["", ',api_key="sk-abcdefghijklmnopqrstuvwxyz0123456789"']))
        preempted, tokens = draw(_series_history(count)), draw(_series_history(count))
        created = [1.7e9 + draw(st.sampled_from([0, 0, 0, 100])) for _ in range(count)]
        buckets = [draw(_series_history(count)) for _ in _BOUNDS]
        odd = draw(st.sampled_from([0.0, 0.0, 0.5]))
        absent = draw(st.sets(st.integers(0, count - 1), max_size=2))
        absent_created = draw(st.sets(st.integers(0, count - 1), max_size=1))
        for i, lines in enumerate(texts):
            usage = draw(st.sampled_from([0.1, 0.5, 0.95, 1.0]))
            lines += [f"vllm:kv_cache_usage_perc{{{labels}}} {usage}",
                      f"vllm:num_requests_running{{{labels}}} {draw(st.integers(0, 9))}",
                      f"vllm:num_requests_waiting{{{labels}}} {draw(st.integers(0, 9))}",
                      f"vllm:num_preemptions_total{{{labels}}} {preempted[i]}",
                      f"vllm:prompt_tokens_total{{{labels}{secret}}} {tokens[i] + odd}"]
            if i not in absent_created:
                lines.append(f"vllm:num_preemptions_created{{{labels}}} {created[i]}")
            cumulative = 0.0
            for bound, history in zip(_BOUNDS, buckets):
                cumulative += history[i]
                lines.append(f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="{bound}"}} {cumulative}')
            lines += [f"vllm:e2e_request_latency_seconds_count{{{labels}}} {cumulative}",
                      f"vllm:e2e_request_latency_seconds_sum{{{labels}}} {cumulative * 0.37}"]
            if i not in absent:
                lines.append(f"vllm:request_success_total{{{labels},finished_reason=\"stop\"}} {tokens[i]}")
    for i in draw(st.sets(st.integers(0, count - 1))):      # an escaped quote: prometheus-client reads that one,
        texts[i].append('build_info{version="1\\"2"} 1')    # and its series get labels dicts of their own
    return ["\n".join(lines) + "\n" for lines in texts]


def _read_thinned_and_whole(texts: list[str], prompts: bool):
    """The expositions saved as files 15 s apart and read as `--metrics` reads them: thinned for the report's
    redaction, and with every sample held."""
    from triage.metrics.inputs import read_files
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for i, text in enumerate(texts):
            path = Path(folder) / f"m{i}.prom"
            path.write_text(text)
            paths.append(str(path))
        return read_files(paths, 15.0, Redactor(prompts=prompts)), read_files(paths, 15.0, None)


@FAST
@given(metric_snapshots(), st.booleans())
@example(["vllm:a_total 1\n", "vllm:a_total 2\n", "vllm:a_total 3\n"], False)
def test_thinned_snapshots_give_the_report_of_every_sample(texts, prompts):
    """Reading snapshots with their counters and histograms thinned (metrics/thinning.py) gives the same
    report, facts, evidence and counts, as holding every sample; and holds no more samples."""
    thinned, whole = _read_thinned_and_whole(texts, prompts)
    assert len(thinned.samples) <= len(whole.samples)
    assert thinned.inputs == whole.inputs
    reports = [report_dict(build_report(Incident(metrics=read, redact_prompts=prompts), KIT))
               for read in (thinned, whole)]
    assert reports[0] == reports[1]


_MERGE_KEEPS = ("kv_cache_usage_max", "waiting_max", "waiting_growth", "preemptions",
                "preemption_rate_per_min", "metrics_snapshots", "metrics_window_seconds", "vllm_lines",
                "requests_finished", "e2e_latency_p50_seconds", "e2e_latency_p95_seconds")
_MERGE_RAISES = ("kv_cache_usage_mean", "saturated_intervals", "saturated_queue_intervals", "saturated_queue_share",
                 "saturated_seconds")


@FAST
@given(metric_snapshots(), st.booleans())
def test_merged_snapshots_keep_the_peaks_and_counts_and_raise_only_the_levels(texts, prompts):
    """Neighbouring snapshots merged past LEVELS_HELD (here at once: a cap of one point) give each engine the
    same peaks, preemptions, window, latency quantiles and counts read as every sample does; the mean level and
    the counts of full scrapes can only rise (a merged scrape's level is its members' peak), the requests
    running only fall (those of the fuller cache's scrape); the report is made and valid."""
    from unittest import mock

    from triage.facts.metric_samples import extract_metric_facts
    from triage.metrics import thinning
    with mock.patch.object(thinning, "LEVELS_HELD", 1):
        merged, whole = _read_thinned_and_whole(texts, prompts)
    assert len({s.scrape for s in merged.samples}) <= len(texts)
    for engine in {s.labels["engine"] for s in whole.samples if "engine" in s.labels}:
        facts = [extract_metric_facts([s for s in read.samples if s.labels.get("engine") == engine],
                                      read.origin.ordering) for read in (merged, whole)]
        for name in _MERGE_KEEPS:
            assert (facts[0].get(name) and facts[0][name].value) == (facts[1].get(name) and facts[1][name].value), name
        for name in _MERGE_RAISES:
            assert (name in facts[0]) == (name in facts[1]), name
            if name in facts[1]:
                assert facts[0][name].value >= facts[1][name].value, name
        if "running_max" in facts[1]:           # the requests running are those of the fuller cache's scrape
            assert facts[0]["running_max"].value <= facts[1]["running_max"].value
    jsonschema.validate(report_dict(build_report(Incident(metrics=merged, redact_prompts=prompts), KIT)), SCHEMA)


# Lines of other programs and the pieces that make the envelope or a signature read a line: the batch search for
# them (logs/envelope.py ENVELOPE_MARKS) decides which lines are read the full way.
ANCHORS = sorted({sig.anchor for sig in KIT.signatures.signatures})
OTHER_PROGRAMS = ["gpu-node-2:68984:74578 [3] NCCL INFO Channel 00/32 : 0 1 2 3",
                  "gpu-node-1:27151:71728 [3] NCCL INFO threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
                  "node-1:1234:1234 [0] NCCL INFO 8 coll channels, 0 collnet channels",
                  "Dec  2 10:43:50 gpu-node-3 kernel: [12345.678901] eth0: renamed from veth1f2e",
                  "Dec  2 10:43:50 gpu-node-3 systemd[1]: Started Session 12 of User root.",
                  "Dec 12 10:43:50 host vllm[1]: ", "Dec 12 10:43:50 host app: {\"log\": \"x\"}",
                  "Dec 12 10:43:50 host app: 2025-07-07T15:19:48Z x", "Dec 12 10:43:50 host app: web | x",
                  "Dec 12 10:43:50 host app: Dec 12 10:43:51 inner app: x",
                  "step 14: loss=1.5404 lr=3.0e-05", "web-1  | text", "  | text", "INFO | stdout | text",
                  "[INFO ] PyProcess - W-1-model-stdout: text", "3 10:00:45 [core.py:718] cut", "[rank1]: text",
                  "- vllm.engine - INFO - text", "INFO:vllm.worker:text", "INFO:     text", "x INFO 01-02 03:04:05 y",
                  "a\x1b[0m b", "a[36m b", "a\\u001b[0m", "tail across cluster]", "a\rb", "(x pid=3) text",
                  "INFO \u0661\u0662-01 03:04:05 [x.py:1] unicode digits", "\u00e9t\u00e9 \ufffd", "   indented",
                  "^^^^", "", " ", "Traceback (most recent call last):", '  File "x.py", line 1, in f',
                  'Dec  2 10:43:50 node kubelet[7]: I1202 "Pod status updated" pod="serving/vllm-0" status=Running',
                  "Dec 12 10:43:50 host app: - vllm.engine - INFO - text",
                  "Dec 12 10:43:50 host app:  vllm x - INFO - y",
                  "run-k8s.io-9af-runc.mount: Deactivated", "exit code: -9)", "pod=vllmethod x", "image vllm:latest",
                  "-----BEGIN PRIVATE KEY-----", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "-----END PRIVATE KEY-----",
                  "- name: HF_TOKEN", "  value: hf_abcdefghijklmnopqrstuvwxyz012345",
                  "Dec 12 10:43:50 h app: name: TOKEN"]


@st.composite
def other_program_line(draw) -> str:
    """A line of another program, an anchor cut in two across lines, or either with marks and anchors put in."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.sampled_from(OTHER_PROGRAMS))
    if kind == 1:
        anchor = draw(st.sampled_from(ANCHORS))
        cut = draw(st.integers(0, len(anchor)))
        return draw(st.sampled_from([anchor[:cut], anchor[cut:], "x" * 70 + anchor[:cut], anchor[cut:] + " y"]))
    if kind == 2:
        return draw(st.text(alphabet=st.sampled_from("ab |[]{}:-0913m\\\r\t INFOpid="), max_size=40))
    pieces = st.one_of(st.sampled_from(OTHER_PROGRAMS), st.sampled_from(ANCHORS), st.sampled_from(SAMPLES),
                       st.text(max_size=12))
    return "".join(draw(st.lists(pieces, min_size=1, max_size=3)))


def _read_the_full_way(envelope, numbered, plain=None) -> list:
    """The records of the lines, each read by the envelope's patterns (or `plain`'s one step where given)."""
    batch = envelope._MarkedBatch([(item, False, False, False) for item in numbered], bytes(len(numbered)), "", [])
    return list(envelope._records_unwrapped([batch], *([plain] if plain else [])))


def _parsed_every_line_the_full_way(lines: list[tuple[int, str]]) -> tuple[list, object]:
    from unittest import mock

    from triage.logs import envelope
    with mock.patch.object(envelope, "_marks_of", lambda anchors: envelope._Marks(None, None)):
        return _parsed(lines, True)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(other_program_line(), log_line()), max_size=40), st.sampled_from([1, 2, 3, 512]))
@example(["x" * 70 + "Out of", " memory", "x" * 70 + "Out of", "memory"], 512)     # an anchor across a wrap
@example(["Traceback (most recent call last):", "gpu-node-2:6:7 [3] NCCL INFO Channel 00/32 : 0 1", "  x"], 512)
def test_lines_without_marks_read_in_one_step_give_what_reading_them_the_full_way_gives(lines, batch):
    """A line holding nothing the envelope reads and no anchor (NCCL INFO, syslog, other programs' output) is made
    its record in one step and not searched for signatures, nor joined to the next line where no anchor spans the
    two: the same events, coverage and unrecognised lines as reading every line the full way, wherever the batches
    of the search fall."""
    from unittest import mock

    from triage.logs import envelope
    numbered = list(enumerate(lines, start=1))
    with mock.patch.object(envelope, "BATCH_LINES", batch):
        fast = _parsed(numbered, True)
    assert fast == _parsed_every_line_the_full_way(numbered)


@FAST
@given(st.lists(other_program_line(), min_size=1, max_size=12))
def test_a_record_read_in_one_step_is_the_full_ways_record(lines):
    """The record made in one step equals the one the envelope's patterns make; one called anchor free holds no
    anchor, and one called so with the next line holds none joined to it either."""
    from triage.logs import envelope
    numbered = list(enumerate(lines, start=1))
    fast = list(envelope.records(numbered, ANCHORS))
    full = _read_the_full_way(envelope, numbered, envelope.plain_record)
    assert [dataclasses.replace(r, anchor_free=False, anchor_free_with_next=False) for r in fast] == full
    for rec, after in zip(fast, [*fast[1:], None]):
        if rec.anchor_free:
            assert not KIT.signatures.anchors_in(rec.message)
        if rec.anchor_free_with_next and after is not None and after.anchor_free and after.line == rec.line + 1 \
                and after.continues_previous:
            assert not KIT.signatures.anchors_in(rec.message + after.message)
            assert not KIT.signatures.anchors_in(rec.message + " " + after.message)
