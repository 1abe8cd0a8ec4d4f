"""Large logs: request traffic counted not parsed, two processes agree with one, memory stays bounded."""
from __future__ import annotations

import random

import pytest

from triage.logs import parse as logparse
from triage.logs.parse import LogParse, split_attempts
from triage.redact import Redactor
from triage.sources import files as sources
from triage.sources.files import LineReader, iter_lines, open_log

from conftest import diagnose_files, diagnose_text

STATS = ("(APIServer pid=1) INFO 09-30 10:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 1234.5 "
         "tokens/s, Avg generation throughput: 456.7 tokens/s, Running: {r} reqs, Waiting: {w} reqs, "
         "GPU KV cache usage: {kv}%, Prefix cache hit rate: 12.3%")


def _request(i: int, prompt: str) -> str:
    return (f"(APIServer pid=1) INFO 09-30 10:00:00 [logger.py:43] Received request chatcmpl-{i:08x}: "
            f"prompt: '{prompt}', params: SamplingParams(n=1, temperature=0.7), prompt_token_ids: None.")


def test_a_prompt_quoting_an_error_is_not_that_error(kit):
    """Request logging is traffic: a prompt that pastes an OOM traceback does not make the server OOM."""
    lines = ["INFO:     Application startup complete."]
    lines += [_request(i, "why do I get torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB?")
              for i in range(50)]
    lines += ['(APIServer pid=1) INFO:     10.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 200 OK'] * 50
    lines += [STATS.format(m=1, s=i, r=3, w=0, kv=12.5) for i in range(3)]
    report = diagnose_text(kit, "\n".join(lines) + "\n")
    assert report.diagnosis.verdict == "healthy"
    (log,) = report.inputs
    assert log.lines_read == 104 and log.lines_recognised == 104


def _big_log(path, n=6000, seed=7):
    rnd = random.Random(seed)
    with open(path, "w") as out:
        for i in range(n):
            r = rnd.random()
            if r < 0.6:
                out.write(_request(i, "x" * rnd.randint(10, 3000)) + "\n")
            elif r < 0.9:
                out.write(f'(APIServer pid=1) INFO:     10.0.0.1:{i} - "POST /v1/completions HTTP/1.1" 200 OK\n')
            else:
                out.write(STATS.format(m=i // 600 % 60, s=i // 10 % 60, r=rnd.randint(1, 30), w=rnd.randint(0, 5),
                                       kv=round(rnd.uniform(10, 99.9), 1)) + "\n")


def _read(path, keys):
    reader = LineReader(open_log(str(path)), keys)
    got = list(reader)
    return got, reader.result().lines_read, list(reader.result().bulk_lines)


def test_two_processes_read_what_one_reads(kit, tmp_path, monkeypatch):
    path = tmp_path / "big.log"
    _big_log(path)
    keys = kit.signatures.bulk_patterns
    one = _read(path, keys)
    monkeypatch.setattr(sources, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "PIECE_BYTES", 4096)   # pieces cut through the middle of lines
    two = _read(path, keys)
    assert two == one
    assert one[1] == 6000 and sum(one[2]) + len(one[0]) == 6000


def test_the_workers_share_the_pieces(kit, tmp_path, monkeypatch):
    """The workers take the pieces in turn, so each keeps working while the parser takes the pieces in order
    (handing a piece to whichever worker the count of pieces in flight named sent every piece after the first
    ones to one worker, and the other sat idle)."""
    from triage.sources import workers
    path = tmp_path / "big.log"
    _big_log(path, n=20000)
    monkeypatch.setattr(sources, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "PIECE_BYTES", 64 * 1024)
    asked: list[int] = []
    original = workers.Worker.ask
    monkeypatch.setattr(workers.Worker, "ask", lambda self, *args: asked.append(id(self)) or original(self, *args))
    _read(path, kit.signatures.bulk_patterns)
    assert len(asked) > 3 * sources.IN_FLIGHT
    assert asked[::2] == [asked[0]] * len(asked[::2]) and asked[1::2] == [asked[1]] * len(asked[1::2])
    assert asked[0] != asked[1]


def test_stats_floods_are_merged_without_losing_peaks_or_counts(kit, tmp_path, monkeypatch):
    path = tmp_path / "stats.log"
    rnd = random.Random(3)
    kvs = [round(rnd.uniform(20, 99.9), 1) for _ in range(2000)]
    path.write_text("".join(STATS.format(m=i // 60 % 60, s=i % 60, r=rnd.randint(1, 9), w=i % 3, kv=kv) + "\n"
                            for i, kv in enumerate(kvs)))
    full = diagnose_files(kit, path).diagnosis.facts
    monkeypatch.setattr(logparse, "STATS_CAP", 100)
    bounded_parse = LogParse("s.log", iter_lines(open_log(str(path))), kit.signatures, Redactor())
    (attempt,) = list(split_attempts(bounded_parse, kit.signatures))
    assert len(attempt.events) <= 101
    merged = diagnose_files(kit, path).diagnosis.facts
    for name in ("kv_cache_usage_max", "stats_lines", "saturated_intervals", "waiting_max", "running_max"):
        assert merged[name].value == full[name].value, name
    assert merged["kv_cache_usage_mean"].value == pytest.approx(full["kv_cache_usage_mean"].value, abs=1e-3)
    assert full["stats_lines"].value == 2000


def test_a_flood_of_one_kind_keeps_its_first_and_last(kit, monkeypatch):
    monkeypatch.setattr(logparse, "KIND_HEAD", 10)
    monkeypatch.setattr(logparse, "KIND_TAIL", 10)
    frames = [f'  File "/x/vllm/worker.py", line {i}, in load_model' for i in range(500)]
    parse = LogParse("f.log", list(enumerate(frames, 1)), kit.signatures, Redactor())
    (attempt,) = list(split_attempts(parse, kit.signatures))
    lines = [e.source.line for e in attempt.events]
    assert lines == list(range(1, 11)) + list(range(491, 501))


def test_a_log_with_little_to_set_aside_is_split_here_with_the_same_result(kit, tmp_path, monkeypatch):
    """Stats lines first: the first pieces show that every line would come back to be parsed, so no worker
    is started and the reader splits the file itself; the lines are the same."""
    path = tmp_path / "stats.log"
    path.write_text("".join(STATS.format(m=i // 60 % 60, s=i % 60, r=i % 9, w=i % 3, kv=50.0) + "\n"
                            for i in range(9000))
                    + "".join(_request(i, "x") + "\n" for i in range(3000)))
    keys = kit.signatures.bulk_patterns
    one = _read(path, keys)
    monkeypatch.setattr(sources, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "PIECE_BYTES", 8192)
    here = []
    from triage.sources import workers
    original = workers.split_range
    monkeypatch.setattr(workers, "split_range", lambda *args: here.append(1) or original(*args))
    monkeypatch.setattr(sources, "_start_workers", lambda path: pytest.fail("a worker was started"))
    two = _read(path, keys)
    assert two == one and here


def _mixed_log(path) -> None:
    path.write_text("".join((_request(i, "y") if i % 4 else STATS.format(m=i // 60 % 60, s=i % 60, r=i % 9, w=0,
                                                                         kv=40.0)) + "\n" for i in range(6000)))


def test_a_worker_that_fails_has_its_range_split_here(kit, tmp_path, monkeypatch):
    """A worker that dies (or cannot read its range) costs nothing but time: the reader splits the range
    itself and lets the workers go; the lines are those of a reading without workers."""
    from triage.sources import workers
    path = tmp_path / "mixed.log"
    _mixed_log(path)
    keys = kit.signatures.bulk_patterns
    one = _read(path, keys)
    monkeypatch.setattr(sources, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "PIECE_BYTES", 8192)
    answered = []
    original = workers.Worker.answer

    def second_fails(self):
        answered.append(1)
        if len(answered) == 2:
            raise workers.WorkerFailed("the worker stopped: test")
        return original(self)
    monkeypatch.setattr(workers.Worker, "answer", second_fails)
    assert _read(path, keys) == one and len(answered) == 2


def test_workers_are_real_processes_and_end_with_the_reading(kit, tmp_path, monkeypatch):
    """The workers are separate processes; a reading given up half-way (the consumer stops) ends them."""
    from triage.sources import workers
    path = tmp_path / "mixed.log"
    _mixed_log(path)
    monkeypatch.setattr(sources, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "PIECE_BYTES", 8192)
    started = []
    original = workers.Worker.__init__

    def record(self, *args):
        original(self, *args)
        started.append(self)
    monkeypatch.setattr(workers.Worker, "__init__", record)
    lines = iter(LineReader(open_log(str(path)), kit.signatures.bulk_patterns))
    first = [next(lines) for _ in range(3)]
    assert first[0][0] == 1 and not started          # the first lines are split here, before any worker starts
    while not started:
        next(lines)
    assert len(started) == sources.WORKERS
    assert all(w._process.poll() is None for w in started)            # working beside this process
    lines.close()
    assert all(w._process.poll() is not None for w in started)        # gone with the reading
