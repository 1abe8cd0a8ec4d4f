"""--since/--until: vLLM's yearless times are given a year as documented, windows cut logs and
timestamped metrics, and the report says which window and how the times were read."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import jsonschema
import pytest

from triage.errors import InputError
from triage.logs.timewindow import parse_time, resolve_times, window_bounds
from triage.model import LogEvent, SourceRef

from conftest import FIXTURES, run_cli
from test_docs import SCHEMA

PREEMPTING = str(FIXTURES / "logs" / "v1" / "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")


def _event(line: int, timestamp: str | None, wall: str | None = None) -> LogEvent:
    return LogEvent("stats", "stats", {}, None, "INFO", timestamp, SourceRef("x.log", line, ""), line, wall)


def test_a_yearless_log_takes_the_current_year():
    times, basis = resolve_times([_event(1, "05-11 14:00:03"), _event(2, "05-11 14:06:02")], datetime(2026, 6, 1))
    assert times == [datetime(2026, 5, 11, 14, 0, 3), datetime(2026, 5, 11, 14, 6, 2)]
    assert basis == "vLLM's timestamps have no year: 2026 assumed (the current year)"


def test_a_date_that_would_be_in_the_future_rolls_back_a_year():
    times, basis = resolve_times([_event(1, "11-30 10:00:00")], datetime(2026, 3, 1))
    assert times == [datetime(2025, 11, 30, 10, 0)]
    assert "2025 assumed (the current year would put the end of the log in the future)" in basis


def test_the_turn_of_the_year_inside_a_log():
    events = [_event(1, "12-31 23:59:50"), _event(2, None), _event(3, "01-01 00:00:10")]
    times, basis = resolve_times(events, datetime(2026, 1, 1, 1, 0))
    assert times == [datetime(2025, 12, 31, 23, 59, 50), datetime(2025, 12, 31, 23, 59, 50),
                     datetime(2026, 1, 1, 0, 0, 10)]
    assert "2025 assumed" in basis and "the year turns (12-31 -> 01-01) at line 3" in basis


def test_a_collectors_iso_time_gives_the_year_and_wins():
    events = [_event(1, "12-31 23:59:59", "2024-12-31T23:59:59.5Z"), _event(2, "01-01 00:00:05"),
              _event(3, "01-01 00:00:09", "2025-01-01T02:00:09+02:00")]
    times, basis = resolve_times(events, datetime(2026, 6, 1))
    assert times == [datetime(2024, 12, 31, 23, 59, 59, 500000), datetime(2025, 1, 1, 0, 0, 5),
                     datetime(2025, 1, 1, 0, 0, 9)]
    assert "taken from the collector's timestamps" in basis


END = datetime(2026, 5, 11, 14, 6, 2)
NOW = datetime(2026, 5, 12, 9, 0, 0)


@pytest.mark.parametrize("text,expected", [
    ("1h30m", timedelta(minutes=90)),
    ("45s", timedelta(seconds=45)),
    ("2026-11-30T10:00", datetime(2026, 11, 30, 10, 0)),
    ("2026-11-30 10:00:30", datetime(2026, 11, 30, 10, 0, 30)),
    ("2026-11-30T10:00+02:00", datetime(2026, 11, 30, 8, 0)),
    ("2026-11-30T10:00:00Z", datetime(2026, 11, 30, 10, 0)),
    ("11-30 10:00", datetime(2025, 11, 30, 10, 0)),         # the year closest to the log's end (2026-05)
    ("05-11 14:00", datetime(2026, 5, 11, 14, 0)),
    ("14:00", datetime(2026, 5, 11, 14, 0)),                # the log's last day
    ("15:00", datetime(2026, 5, 10, 15, 0)),                # after the end: the day before
    ("now", NOW),
    ("1778493600", datetime(2026, 5, 11, 10, 0)),           # Unix seconds, UTC
])
def test_window_times(text, expected):
    assert parse_time(text, "--since", END, NOW) == expected


def test_a_duration_counts_back_from_until_or_the_end():
    assert window_bounds("10m", None, END, NOW) == (END - timedelta(minutes=10), None)
    assert window_bounds("10m", "5m", END, NOW) == (END - timedelta(minutes=15), END - timedelta(minutes=5))
    with pytest.raises(InputError, match="is after --until"):
        window_bounds("14:05", "14:01", END, NOW)
    with pytest.raises(InputError, match="cannot read 'yesterday'"):
        parse_time("yesterday", "--since", END, NOW)


def _data(*args):
    result = run_cli(*args, "--format", "json")
    data = json.loads(result.stdout) if result.stdout else None
    if data is not None:
        jsonschema.validate(data, SCHEMA)
    return result.returncode, data, result.stderr.decode()


def test_since_keeps_the_last_minutes_and_the_startups_settings():
    _, whole, _ = _data(PREEMPTING)
    code, last, _ = _data(PREEMPTING, "--since", "2m")
    assert code == 1 and last["verdict"] == "preemption_slowdown"
    assert last["facts"]["preemptions"]["value"] < whole["facts"]["preemptions"]["value"]
    w = last["window"]
    assert (w["since"], w["until"]) == ("2026-05-11 14:04:02", None)
    assert 0 < w["events_kept"] < w["events_total"] and w["context_events"] > 0
    assert w["basis"] == "read from the collector's timestamps, which carry the year"
    # settings printed at startup still count; serving evidence comes from inside the window only
    assert last["facts"]["max_num_seqs"]["value"] == 512 and last["facts"]["model"]["value"] == "Qwen/Qwen3-32B"
    stamps = [re.search(r"\d\d-\d\d (\d\d:\d\d:\d\d)", r["text"])[1] for r in last["findings"][0]["evidence"]
              if "throughput" in r["text"]]                    # the serving lines, not the startup's context
    assert stamps and all(s >= "14:04:02" for s in stamps)
    assert whole["window"] is None


def test_the_text_report_says_the_window_and_how_times_were_read(tmp_path):
    log = tmp_path / "bare.log"     # the same log without kubectl's timestamps: vLLM's own, yearless
    log.write_text("".join(line.split(" ", 1)[1] for line in open(PREEMPTING, encoding="utf-8")))
    out = run_cli(str(log), "--since", "05-11 14:05", "--until", "05-11 14:06").stdout.decode()
    year = datetime.now().year
    assert re.search(rf"^Window: ({year}|{year - 1})-05-11 14:05:00 to \1-05-11 14:06:00: \d+ of \d+ recognised log "
                     r"records inside \(plus \d+ records of the startup before it, for its settings\)\.$", out, re.M)
    assert re.search(r"^Times: vLLM's timestamps have no year: \d{4} assumed \(the current year", out, re.M)


def test_a_window_before_the_server_started_is_inconclusive_and_says_so():
    code, data, _ = _data(PREEMPTING, "--until", "2026-05-11T13:00")
    assert code == 3 and data["verdict"] == "inconclusive" and data["window"]["events_kept"] == 0
    assert any("nothing in it falls inside the window" in w for w in data["warnings"])


@pytest.mark.parametrize("args,needle", [
    (["--since", "yesterday"], "--since: cannot read 'yesterday' as a time or a duration"),
    (["--since", "14:05", "--until", "14:01"], "is after --until"),
])
def test_bad_windows_are_one_line_errors(args, needle):
    code, _, err = _data(PREEMPTING, *args)
    assert code == 2 and needle in err and err.count("\n") == 1


def test_a_log_without_timestamps_cannot_be_windowed(tmp_path):
    log = tmp_path / "plain.log"
    log.write_text("Loading model weights took 14.9888 GB\n# GPU blocks: 1478, # CPU blocks: 2048\n")
    code, _, err = _data(str(log), "--since", "1h")
    assert code == 2 and "has no timestamps, so --since/--until cannot apply" in err and "--timestamps" in err


def _stamped(src, dest, unix_seconds: int):
    """A saved /metrics body with Prometheus sample timestamps (milliseconds), as /federate writes it."""
    lines = [f"{line} {unix_seconds * 1000}" if line and not line.startswith("#") else line
             for line in open(src, encoding="utf-8").read().splitlines()]
    dest.write_text("\n".join(lines) + "\n")
    return str(dest)


def test_the_window_applies_to_timestamped_metric_samples(tmp_path):
    t0 = 1778508000                              # 2026-05-11 14:00:00 UTC
    m0 = _stamped(FIXTURES / "metrics" / "v1-preempting-0.prom", tmp_path / "m0.prom", t0)
    m1 = _stamped(FIXTURES / "metrics" / "v1-preempting-1.prom", tmp_path / "m1.prom", t0 + 3600)
    _, both, _ = _data("--metrics", m0, "--metrics", m1)
    assert both["facts"]["preemptions"]["value"] == 18954 - 18211          # the increase between scrapes
    _, last, _ = _data("--metrics", m0, "--metrics", m1, "--since", "2026-05-11T14:30:00Z")
    assert last["facts"]["preemptions_since_start"]["value"] == 18954      # one scrape left: the counter
    assert last["window"]["samples_kept"] * 2 == last["window"]["samples_total"]
    assert "metric samples by their own timestamps (UTC)" in last["window"]["basis"]


def test_untimed_metrics_are_kept_with_a_warning():
    code, data, _ = _data(PREEMPTING, "--metrics", str(FIXTURES / "metrics" / "v1-preempting-0.prom"), "--since", "2m")
    assert any("carry no timestamps, so the window does not apply to them" in w for w in data["warnings"])


def test_a_window_counts_every_stats_line_inside_it_in_a_long_log(tmp_path):
    """Past the first thousands of stats lines a run of them is read as one event (logs/statsrun.py); inside a
    window each line is read alone, so the window's edge falls where the lines say, not on a run's last time."""
    from triage.logs.parse import STATS_CAP
    start = datetime(2026, 5, 11, 0, 0, 5)
    stamps = [start + timedelta(seconds=10 * i) for i in range(STATS_CAP + 400)]
    log = tmp_path / "long.log"
    log.write_text("".join(
        f"(APIServer pid=1) INFO {t:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        f"Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.0%, "
        f"Prefix cache hit rate: 0.0%\n" for t in stamps), encoding="utf-8")
    since, until = datetime(2026, 5, 11, 11, 13), datetime(2026, 5, 11, 11, 17)     # stamps end in :x5
    _, data, _ = _data(str(log), "--since", f"{since:%m-%d %H:%M}", "--until", f"{until:%m-%d %H:%M}")
    assert stamps[STATS_CAP] < since
    assert data["facts"]["stats_lines"]["value"] == sum(since <= t <= until for t in stamps) == 24
