"""One reader of a log line's time (triage/logs/logtime.py): vLLM's yearless stamp, with milliseconds, a
syslog wrapper's and kubectl's ISO time all read the same wherever a stage orders or measures by them."""
from __future__ import annotations

import pytest

from triage.facts.log_events import _minutes
from triage.logs.envelope import records
from triage.logs.logtime import month_day_time
from triage.logs.parse import merge_events
from triage.model import LogEvent, SourceRef

LINE = "Loading model weights took 14.99 GiB"


@pytest.mark.parametrize("raw,clock", [
    (f"INFO 05-24 22:18:27 [loader.py:12] {LINE}", (5, 24, 22, 18, 27)),                      # vLLM
    (f"INFO 05-24 22:18:27.123 [loader.py:12] {LINE}", (5, 24, 22, 18, 27)),                  # with milliseconds
    (f"(EngineCore_DP0 pid=7) INFO 05-24 22:18:27,123 [loader.py:12] {LINE}", (5, 24, 22, 18, 27)),
    (f"Nov 30 12:00:01 gpu-node-3 vllm[1234]: {LINE}", (11, 30, 12, 0, 1)),                   # syslog, no vLLM prefix
    (f"Jul  7 15:19:48 gpu-node-3 vllm[1234]: {LINE}", (7, 7, 15, 19, 48)),                   # syslog pads the day
    (f"Nov 30 12:00:01 gpu-node-3 vllm[1234]: INFO 11-30 11:59:59 [loader.py:12] {LINE}", (11, 30, 11, 59, 59)),
    (f"2026-11-30T12:00:01.123456789Z {LINE}", (11, 30, 12, 0, 1)),                            # kubectl --timestamps
    (f"2026-11-30T12:00:01+02:00 {LINE}", (11, 30, 12, 0, 1)),     # as written, zone not applied
])
def test_every_format_of_a_line_time_reads_as_month_day_time(raw, clock):
    [record] = list(records([(1, raw)]))
    assert month_day_time(record.timestamp) == clock


@pytest.mark.parametrize("text", [None, "", "1732968001.5", "13:00", "Foo 30 12:00:01", "2026-11-30T12:00:01 junk",
                                  "05-24 22:18:27 and more"])
def test_anything_else_is_no_time(text):
    assert month_day_time(text) is None


def test_the_time_given_for_since_may_leave_out_the_seconds():
    assert month_day_time("11-30 10:00") == (11, 30, 10, 0, 0)
    assert month_day_time("11-30T10:00:05") == (11, 30, 10, 0, 5)


def _event(path: str, line: int, stamp: str) -> LogEvent:
    return LogEvent("stats", "stats_v1", {}, None, None, stamp, SourceRef(path, line, ""), line)


def test_syslog_wrapped_files_merge_in_time_order_and_measure_the_same_span():
    """Two syslog-wrapped logs of one incident: merged by their times, as vLLM-stamped ones are, and
    the serving time measured over the same stamps."""
    a = [_event("a.log", 1, "Nov 30 12:00:01"), _event("a.log", 2, "Nov 30 12:00:05")]
    b = [_event("b.log", 1, "Nov 30 12:00:03"), _event("b.log", 2, "Nov 30 12:02:01")]
    merged = list(merge_events([a, b]))
    assert [(e.source.path, e.source.line) for e in merged] == [("a.log", 1), ("b.log", 1), ("a.log", 2), ("b.log", 2)]
    assert _minutes([e.timestamp for e in merged]) == pytest.approx(2.0)
    vllm = [_event("c.log", 1, "11-30 12:00:01"), _event("c.log", 2, "11-30 12:02:01")]
    assert _minutes([e.timestamp for e in vllm]) == _minutes([e.timestamp for e in merged])


@pytest.mark.parametrize("stamps, minutes", [
    (["11-30 23:50:00", "12-01 00:14:00"], 24.0),                        # the end of a month of 30 days
    (["01-31 23:00:00", "02-01 01:00:00"], 120.0),
    (["02-28 23:00:00", "03-01 01:00:00"], 120.0),                       # no February 29 in the log: 28 days
    (["02-28 23:00:00", "02-29 12:00:00", "03-01 01:00:00"], 1560.0),    # a February 29 says the year is a leap year
    (["12-31 23:59:00", "01-01 00:01:00"], 2.0),                         # the year turns
    (["Apr 30 23:59:00", "May  1 00:01:00"], 2.0),
])
def test_a_span_across_the_end_of_a_month_is_the_calendars(stamps, minutes):
    """The serving time and the preemption rate divide by spans between stamps without a year: a month of 30
    days ends after its 30th day (a span over November 30 used to count a day more)."""
    assert _minutes(stamps) == pytest.approx(minutes)


def test_the_preemption_rate_of_a_log_across_a_month_end(tmp_path):
    """Twelve stats intervals of two minutes from 11-30 23:50, ten preemptions each: 5 a minute, not a day's worth
    fewer."""
    import json
    log = tmp_path / "month-end.log"
    log.write_text("".join(
        f"(APIServer pid=1) INFO {'11-30 23' if minute < 60 else '12-01 00'}:{minute % 60:02d}:00 [loggers.py:123] "
        "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 40 reqs, "
        "Waiting: 3 reqs, Preemptions: 10, GPU KV cache usage: 99.0%, Prefix cache hit rate: 0.0%\n"
        for minute in range(50, 76, 2)))
    from conftest import run_cli
    facts = json.loads(run_cli("--format", "json", str(log)).stdout)["facts"]
    assert facts["serving_minutes"]["value"] == 24.0
    assert facts["preemptions"]["value"] == 130
    assert facts["preemption_rate_per_min"]["value"] == pytest.approx(130 / 26, abs=0.01)
