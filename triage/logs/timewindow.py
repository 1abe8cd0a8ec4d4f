"""--since / --until: cut an incident down to a time window, and say how the log's times were read.

vLLM stamps its lines `MM-DD HH:MM:SS`: no year, no zone (the server's local time, UTC in most
containers). A collector's wrapper (kubectl/docker `--timestamps`, CRI, JSON collectors) adds a full
ISO time. Each recognised record gets one time, in this order:

1. the wrapper's ISO time when the line has one (converted to UTC when it names a zone);
2. else vLLM's time, with the year of the nearest wrapper time in the same input (the year that
   puts it closest to it) when any line has one;
3. else the current year, plus one after each turn of the year inside the log (12-31 -> 01-01), and
   all of it a year earlier when that would put the end of the log in the future;
4. a record without a time of its own (a traceback line) takes the time of the record before it.

A window that starts after the server started keeps that startup's settings lines (version, args,
engine config, weights, KV cache size) as context, so `--since 1h` on a server up for a week still
knows its model, max_model_len and KV cache; failures and serving records outside it are dropped.
This module hands back the records before the window; parse.startup_context, which knows where a
startup begins, picks the context from them.

The window's own times: a duration (`90s`, `30m`, `1h`, `2d`, `1h30m`) is measured back from the
end of the window (`--until`, else the end of the log); an absolute time is `2026-11-30T10:00`
(a zone such as `Z` or `+02:00` is converted to UTC), `11-30 10:00` (the year closest to the end of
the log), `10:00` (the log's last day), Unix seconds, or `now` (UTC). A time without a zone is in
the log's own clock.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Sequence

import regex

from ..errors import InputError
from ..metrics.parse import MetricSample
from ..model import LogEvent, TimeWindow
from .logtime import month_day_time

_ISO = regex.compile(r"^(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d)(?:[.,](\d+))?)?)?\s*(Z|[+-]\d\d:?\d\d)?$")
_CLOCK = regex.compile(r"^(\d{1,2}):(\d\d)(?::(\d\d))?$")
_DURATION = regex.compile(r"^(?:(\d+(?:\.\d+)?)\s*([smhdw]))+$")
_DURATION_PART = regex.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_UNIX_MIN = 1e9                      # Unix seconds after 2001; smaller metric times are relative
FUTURE_SLACK = timedelta(days=1)     # vLLM's local time against a UTC clock


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_iso(text: str) -> datetime | None:
    """An ISO date-time (a zone is converted to UTC, then dropped); None when it is not one."""
    m = _ISO.match(text.strip())
    if not m:
        return None
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        when = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), micro)
    except ValueError:
        return None
    if zone:
        sign = 1 if zone[0] == "+" else -1
        offset = timedelta(0) if zone == "Z" else \
            sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[-2:]))
        when -= offset
    return when


def _wall(text: str | None) -> datetime | None:
    """A collector's time with a year: ISO, or Unix seconds as JSON collectors write them."""
    if not text:
        return None
    if regex.fullmatch(r"\d{9,11}(?:\.\d+)?", text.strip()):
        return datetime.fromtimestamp(float(text), timezone.utc).replace(tzinfo=None)
    return parse_iso(text)


def _with_year(stamp: tuple[int, int, int, int, int], year: int) -> datetime | None:
    try:
        return datetime(year, *stamp)
    except ValueError:                       # 02-29 in a year that has none
        return None


def _nearest_year(stamp: tuple[int, int, int, int, int], anchor: datetime) -> datetime | None:
    candidates = [d for y in (anchor.year - 1, anchor.year, anchor.year + 1) if (d := _with_year(stamp, y))]
    return min(candidates, key=lambda d: abs(d - anchor)) if candidates else None


def resolve_times(events: Sequence[LogEvent], now: datetime) -> tuple[list[datetime | None], str]:
    """One time per event of one input (see the module docstring), and a sentence saying how."""
    walls = [_wall(e.wall_time) or _wall(e.timestamp) for e in events]
    stamps = [month_day_time(e.timestamp) for e in events]
    times: list[datetime | None] = list(walls)
    pending = [i for i, (w, s) in enumerate(zip(walls, stamps)) if w is None and s is not None]
    anchors = [i for i, w in enumerate(walls) if w is not None]
    if not pending:
        basis = "read from the collector's timestamps, which carry the year" if anchors else "no timestamps"
    elif anchors:
        for i in pending:
            before = [a for a in anchors if a < i]
            anchor = walls[before[-1] if before else anchors[0]]
            times[i] = _nearest_year(stamps[i], anchor)  # type: ignore[arg-type]
        basis = "vLLM's timestamps have no year: it is taken from the collector's timestamps in the same input"
    else:
        base, turns = now.year, []
        offsets, last_month, offset = {}, None, 0
        for i in pending:
            month = stamps[i][0]  # type: ignore[index]
            if last_month is not None and month <= last_month - 6:
                offset += 1
                turns.append(events[i].source.line)
            last_month = month
            offsets[i] = offset
        latest = _with_year(stamps[pending[-1]], base + offsets[pending[-1]])  # type: ignore[arg-type]
        rolled = latest is not None and latest > now + FUTURE_SLACK
        if rolled:
            base -= 1
        for i in pending:
            times[i] = _with_year(stamps[i], base + offsets[i])  # type: ignore[arg-type]
        basis = (f"vLLM's timestamps have no year: {base} assumed"
                 + (" (the current year would put the end of the log in the future)" if rolled
                    else " (the current year)"))
        if turns:
            basis += f"; the year turns (12-31 -> 01-01) at line {turns[0]}"
    first = next((t for t in times if t is not None), None)
    last = first
    for i, t in enumerate(times):
        if t is None:
            times[i] = last
        else:
            last = t
    return times, basis


def _duration(text: str) -> timedelta | None:
    compact = text.strip().lower()
    if not _DURATION.match(compact):
        return None
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(compact)))


def parse_time(text: str, flag: str, end: datetime, now: datetime) -> datetime | timedelta:
    """An absolute time in the log's clock, or a duration (the caller measures it back)."""
    value = text.strip()
    span = _duration(value)
    if span is not None:
        return span
    if value.lower() == "now":
        return now
    if regex.fullmatch(r"\d{9,11}(?:\.\d+)?", value):
        return datetime.fromtimestamp(float(value), timezone.utc).replace(tzinfo=None)
    iso = parse_iso(value)
    if iso is not None:
        return iso
    yearless = month_day_time(value)
    if yearless is not None:
        got = _nearest_year(yearless, end)
        if got is not None:
            return got
    m = _CLOCK.match(value)
    if m and int(m[1]) < 24:
        when = end.replace(hour=int(m[1]), minute=int(m[2]), second=int(m[3] or 0), microsecond=0)
        return when - timedelta(days=1) if when > end else when
    raise InputError(flag, f"cannot read {text!r} as a time or a duration",
                     "e.g. 1h, 30m, 2026-11-30T10:00, '11-30 10:00', 10:00, now, or Unix seconds")


def window_bounds(since: str | None, until: str | None, end: datetime,
                  now: datetime) -> tuple[datetime | None, datetime | None]:
    """--until DURATION is that long before the end; --since DURATION that long before --until (or the end)."""
    upper = parse_time(until, "--until", end, now) if until else None
    if isinstance(upper, timedelta):
        upper = end - upper
    lower = parse_time(since, "--since", end, now) if since else None
    if isinstance(lower, timedelta):
        lower = (upper or end) - lower
    if lower is not None and upper is not None and lower > upper:
        raise InputError("--since", f"{_show(lower)} is after --until {_show(upper)}", "swap them")
    return lower, upper


def _show(when: datetime | None) -> str | None:
    return when.strftime("%Y-%m-%d %H:%M:%S") if when else None


def _inside(when: datetime | None, lower: datetime | None, upper: datetime | None) -> bool:
    return when is not None and (lower is None or when >= lower) and (upper is None or when <= upper)


def apply_window(logs: Sequence[tuple[str, list[LogEvent]]], samples: Sequence[MetricSample], since: str | None,
                 until: str | None, now: datetime,
                 ) -> tuple[list[tuple[list[LogEvent], list[LogEvent]]], list[MetricSample], TimeWindow, list[str]]:
    """Keep the log records (per input: its name and events) and timestamped metric samples inside
    the window; say what was kept. Per input: (the records before the window, the records inside), the
    first only when the second is not empty: the startup context is taken from it by whoever cuts startups
    (parse.startup_context), and counted into the window's `context_events` there."""
    per_input = [resolve_times(events, now) for _, events in logs]
    log_times = [t for times, _ in per_input for t in times if t is not None]
    # Where the metrics end is vLLM's samples' to say: another series in a body may carry a later time of its own
    timing = [s for s in samples if s.name.startswith("vllm:")] or samples
    metric_times = [datetime.fromtimestamp(s.time, timezone.utc).replace(tzinfo=None)
                    for s in timing if s.time is not None and s.time >= _UNIX_MIN]
    if not log_times and not metric_times:
        where = ", ".join(name for name, _ in logs) or "the metrics"
        raise InputError(where, "has no timestamps, so --since/--until cannot apply",
                         "capture the log with timestamps (kubectl logs --timestamps, "
                         "docker logs -t), or drop the window")
    end = max(log_times) if log_times else max(metric_times)
    lower, upper = window_bounds(since, until, end, now)
    kept: list[tuple[list[LogEvent], list[LogEvent]]] = []
    warnings: list[str] = []
    inside_total = 0
    for (name, all_events), (times, _) in zip(logs, per_input):
        events = [e for e, t in zip(all_events, times) if _inside(t, lower, upper)]
        if all_events and not events:
            warnings.append(f"{name}: nothing in it falls inside the window")
        before = [e for e, t in zip(all_events, times) if t is not None and lower is not None
                  and t < lower] if events else []
        inside_total += len(events)
        kept.append((before, events))
    windowed: list[MetricSample] = []
    untimed = set()
    for s in samples:
        if s.time is None or s.time < _UNIX_MIN:
            windowed.append(s)
            untimed.add(s.source.path)
        elif _inside(datetime.fromtimestamp(s.time, timezone.utc).replace(tzinfo=None), lower, upper):
            windowed.append(s)
    warnings.extend(f"{path}: its samples carry no timestamps, so the window does not apply to them"
                    for path in sorted(untimed))
    bases = sorted({basis for (_, basis), (_, events) in zip(per_input, logs) if events})
    if metric_times:
        bases.append("metric samples by their own timestamps (UTC)")
    window = TimeWindow(since=_show(lower), until=_show(upper), basis="; ".join(bases) or "no timestamps",
                        events_kept=inside_total, events_total=sum(len(events) for _, events in logs),
                        context_events=0,
                        samples_kept=sum(1 for s in windowed if s.source.path not in untimed),
                        samples_total=sum(1 for s in samples if s.source.path not in untimed))
    return kept, windowed, window, warnings
