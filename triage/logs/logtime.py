"""The one reader of the time a log line carries, for every stage that orders or measures by it.

vLLM stamps its records `MM-DD HH:MM:SS` (sometimes with milliseconds): no year, no zone. A line that
reaches us without vLLM's prefix carries its collector's time instead: syslog's `Nov 30 12:00:01`
(no year either) or an ISO time from kubectl/docker --timestamps or a JSON collector. Merging files,
measuring the serving time and the --since/--until window all read them here, so they agree.
"""
from __future__ import annotations

import re

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_VLLM = re.compile(r"(\d\d)-(\d\d)[ T](\d\d):(\d\d)(?::(\d\d))?(?:[.,]\d+)?")
_SYSLOG = re.compile(rf"({'|'.join(MONTHS)}) +(\d{{1,2}}) (\d\d):(\d\d):(\d\d)")
_ISO = re.compile(r"\d{4}-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,]\d+)?\s*(?:Z|[+-]\d\d:?\d\d)?")

Clock = tuple[int, int, int, int, int]     # month, day, hour, minute, second


def year_turned(last_month: int, month: int) -> bool:
    """vLLM's stamps have no year: in a log's order, a month going from 12 back to 1 is the next year's."""
    return last_month == 12 and month == 1


_DAYS_BEFORE_MONTH = (0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)    # in a year of 365 days


def seconds_since_start(clock: Clock, year: int, leap: bool) -> int | None:
    """Seconds from the start of a log's first year to `clock` in its year `year` (0 the first; years of 365
    days, February of 29 when `leap`): spans between stamps as the calendar counts them, across the end of a
    month of 30 days too. None for a month or day no calendar has."""
    month, day, hour, minute, second = clock
    if not 1 <= month <= 12 or not 1 <= day <= 31:
        return None
    days = year * 365 + _DAYS_BEFORE_MONTH[month - 1] + (1 if leap and month > 2 else 0) + day - 1
    return ((days * 24 + hour) * 60 + minute) * 60 + second


def month_day_time(stamp: str | None) -> Clock | None:
    """(month, day, hour, minute, second) as the stamp writes them, or None when it is none of vLLM's
    `MM-DD HH:MM[:SS][.mmm]`, syslog's `Nov 30 12:00:01` or an ISO date-time (whose zone is not
    applied: these are for ordering and spans within one log; timewindow converts ISO times whole)."""
    if not stamp:
        return None
    text = stamp.strip()
    m = _VLLM.fullmatch(text)
    if m:
        return int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5] or 0)
    m = _SYSLOG.fullmatch(text)
    if m:
        return MONTHS.index(m[1]) + 1, int(m[2]), int(m[3]), int(m[4]), int(m[5])
    m = _ISO.fullmatch(text)
    if m:
        return int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5])
    return None
