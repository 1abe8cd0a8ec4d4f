"""Parsing in context: wrapped lines, tracebacks, coverage, restarts, several files as one incident."""
from __future__ import annotations

import pytest

from triage.logs.parse import LogParse, merge_events, split_attempts
from triage.redact import Redactor
from triage.sources.files import numbered_lines

from conftest import diagnose_text

OOM_WRAPPED = [
    "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:01 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to all",
    "ocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is free. Including "
    "non-PyTorch memory, th",
    "is process has 78.10 GiB memory in use. Of the allocated memory 77.00 GiB is allocated by "
    "PyTorch, and 10.00 MiB is",
    " reserved by PyTorch but unallocated.",
]


class _Parsed:
    def __init__(self, parse):
        self.events = list(parse)
        result = parse.result()
        self.summary, self.unrecognised = result.summary, list(result.unrecognised)


def _parse(kit, lines, name="a.log"):
    return _Parsed(LogParse(name, list(enumerate(lines, start=1)), kit.signatures, Redactor()))


def test_hard_wrapped_line_is_rejoined(kit):
    parsed = _parse(kit, OOM_WRAPPED)
    oom = [e for e in parsed.events if e.kind == "cuda_oom"]
    assert len(oom) == 1
    fields = oom[0].fields
    assert fields["tried_to_allocate_gib"] == 2.0 and fields["gpu_total_gib"] == 79.19
    assert fields["this_process_gib"] == 78.10 and oom[0].source.line == 1
    assert parsed.summary.lines_recognised == 4


def test_unprefixed_lines_are_not_glued_together(kit):
    parsed = _parse(kit, ["Loading model weights took 14.9888 GB", "# GPU blocks: 1478, # CPU blocks: 2048",
                          "Maximum concurrency for 29000 tokens per request: 0.82x"])
    assert [(e.kind, e.source.line) for e in parsed.events] == [
        ("weights_loaded", 1), ("gpu_blocks", 2), ("max_concurrency", 3)]


def test_log_cut_mid_line_still_yields_what_it_holds(kit):
    parsed = _parse(kit, ["(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the models's max "
                          "seq len (262144), (24.0 GiB KV cache is needed, which is larger than the available KV cache "
                          "memory (3.18 GiB). Based on the available memory, the estimated maximum "
                          "model length is 34736."
                          " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                          "initializing the eng"])
    (event,) = [e for e in parsed.events if e.kind == "kv_too_small"]
    assert event.fields["estimated_max_model_len"] == 34736 and event.fields["kv_cache_gib"] == 3.18


def test_traceback_body_counts_as_recognised(kit):
    lines = ["ERROR 06-30 13:53:19 [core.py:515] Traceback (most recent call last):",
             'ERROR 06-30 13:53:19 [core.py:515]   File "/x/vllm/v1/engine/core.py", line 506, in run_engine_core',
             "ERROR 06-30 13:53:19 [core.py:515]     engine_core = EngineCoreProc(*args, **kwargs)",
             "ERROR 06-30 13:53:19 [core.py:515]                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
             "ERROR 06-30 13:53:19 [core.py:515] ValueError: No available memory for the cache blocks."]
    parsed = _parse(kit, lines)
    assert parsed.summary.lines_recognised == 5
    assert parsed.unrecognised == []


def test_unrecognised_warnings_are_grouped_by_shape(kit):
    lines = [f"WARNING 01-01 00:00:0{i} [x.py:1] Slow tokenizer for request {i} took {i}.5 s" for i in range(5)]
    lines.append("ERROR 01-01 00:00:09 [y.py:2] Something odd happened")
    lines.append("INFO 01-01 00:00:09 [y.py:2] plain info is not listed")
    parsed = _parse(kit, lines)
    assert [(g.level, g.count) for g in parsed.unrecognised] == [("WARNING", 5), ("ERROR", 1)]
    assert parsed.unrecognised[0].example.line == 1
    assert parsed.summary.lines_read == 7 and parsed.summary.lines_recognised == 0
    assert parsed.summary.vllm_lines == 7


def test_restarts_are_split_into_attempts(kit):
    attempt = [
        "INFO 06-28 23:40:01 api_server.py:177] vLLM API server version 0.5.0.post1",
        "INFO 06-28 23:40:03 llm_engine.py:161] Initializing an LLM engine (v0.5.0.post1) with config: model='m', "
        "max_seq_len=32768, tensor_parallel_size=1",
        "INFO 06-28 23:40:20 model_runner.py:160] Loading model weights took 14.9595 GB",
        "INFO 06-28 23:40:25 gpu_executor.py:83] # GPU blocks: 1200, # CPU blocks: 2048",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored "
        "in KV cache (19200).",
    ]
    report = diagnose_text(kit, "\n".join(attempt * 3) + "\n")
    assert len(report.attempts) == 3
    assert report.same_failure_attempts == 3
    assert report.diagnosis.verdict == "kv_cache_too_small"
    assert report.attempts[-1].first.line == 11


def test_several_files_merge_by_time(kit):
    api = _parse(kit,
                 ["(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {'model': 'm', "
                  "'max_model_len': 8192}",
                       "(APIServer pid=1) INFO 09-30 10:02:05 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000"],
                 name="api.log")
    engine = _parse(kit,
                    ["(EngineCore_DP0 pid=9) INFO 09-30 10:01:12 [gpu_model_runner.py:2007] Model loading took "
                     "15.27 GiB and 9.8 seconds"],
                    name="engine.log")
    merged = list(merge_events([api.events, engine.events]))
    assert [e.source.path for e in merged] == ["api.log", "engine.log", "api.log"]
    assert [e.seq for e in merged] == [0, 1, 2]
    assert len(list(split_attempts(merged, kit.signatures))) == 1


def test_serving_time_runs_on_across_the_turn_of_the_year(kit):
    """vLLM's stamps have no year: stats lines from 12-31 into 01-01 served for the minutes between them, not
    for the eleven months between January and December."""
    line = ("(APIServer pid=1) INFO {} [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg "
            "generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.0%, "
            "Prefix cache hit rate: 0.0%")
    stamps = ["12-31 23:58:00", "12-31 23:59:00", "01-01 00:00:00", "01-01 00:01:00"]
    report = diagnose_text(kit, "\n".join(line.format(s) for s in stamps) + "\n")
    assert report.diagnosis.facts["serving_minutes"].value == 3.0


@pytest.mark.parametrize("fold", [True, False])
def test_a_long_log_serves_from_its_first_stats_line_to_its_last(kit, monkeypatch, fold):
    """Past the cap an attempt merges its stats lines, and a merged interval carries its last line's time: the
    serving time and the preemption rate still span from the first stats line (`since`), whether the lines were
    folded into runs or read one by one (a time window, several logs)."""
    from triage.logs import parse as logparse
    monkeypatch.setattr(logparse, "STATS_CAP", 50)
    if not fold:
        monkeypatch.setattr(logparse, "fold_runs", lambda blocks, *args: numbered_lines(blocks))
    line = ("(APIServer pid=1) INFO 11-29 {:02d}:{:02d}:{:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
            "1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, Preemptions: 1, "
            "GPU KV cache usage: 4.0%, Prefix cache hit rate: 0.0%")
    text = "".join(line.format(10 + n // 360, n // 6 % 60, n % 6 * 10) + "\n" for n in range(600))
    facts = diagnose_text(kit, text).diagnosis.facts
    assert facts["serving_minutes"].value == pytest.approx(599 / 6)
    assert facts["preemptions"].value == 600
    assert facts["preemption_rate_per_min"].value == pytest.approx(600 / (599 / 6 * 600 / 599))


def test_several_long_logs_keep_each_stats_line_at_its_own_time(kit, tmp_path):
    """Logs of several processes are interleaved by their lines' times, so an engine restarting in one cuts the
    other's stats lines where they say: none are read a run at a time there (logs/statsrun.py), whose run would
    carry its last line's time across the restart."""
    from datetime import datetime, timedelta

    from conftest import diagnose_files
    start = datetime(2026, 11, 29, 10, 0, 5)
    stamps = [start + timedelta(seconds=10 * i) for i in range(4200)]
    api = tmp_path / "api.log"
    api.write_text("".join(
        f"(APIServer pid=1) INFO {t:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.0%, "
        "Prefix cache hit rate: 0.0%\n" for t in stamps), encoding="utf-8")
    restart = stamps[4060] + timedelta(seconds=5)
    engine = tmp_path / "engine.log"
    engine.write_text("".join(
        f"(EngineCore_DP0 pid=311) INFO {t:%m-%d %H:%M:%S} [core.py:76] Initializing a V1 LLM engine (v0.10.2) with "
        "config: model='Qwen/Qwen2.5-7B-Instruct', max_seq_len=32768, tensor_parallel_size=1\n"
        for t in (start - timedelta(minutes=1), restart)), encoding="utf-8")
    report = diagnose_files(kit, api, engine)
    assert len(report.attempts) == 2
    assert report.diagnosis.facts["stats_lines"].value == sum(t > restart for t in stamps) == 139
