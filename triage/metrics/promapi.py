"""Read the vLLM series of one or many servers from a Prometheus server (HTTP API, query_range).

The series come back as the same MetricSample the /metrics parser makes, one scrape per query
step, so the facts are computed by the same code. Evidence for a series is
`prometheus:<series>` with line 0. Gauges and counters are read at every step; histograms only at
the window's start and end (their increase is all the quantiles need), which keeps a large fleet's
answer small. Network only through triage/metrics/httpget.py.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

import regex

from ..errors import InputError
from .httpget import HttpOptions, display_url, get
from .names import (
    CACHE_CONFIG,
    DCGM_FREE,
    DCGM_RESERVED,
    DCGM_USED,
    HISTOGRAMS,
    KV_USAGE,
    PREEMPTIONS,
    PREFIX_HIT_RATE,
    PREFIX_HITS,
    PREFIX_QUERIES,
    REQUEST_PREEMPTIONS,
    RUNNING,
    SWAPPED,
    WAITING,
)
from .parse import MAX_SERIES, MetricSample, canonical_name, sample_time, sample_value

WHAT = "a Prometheus server (its base URL, e.g. http://prometheus:9090)"
MAX_STEPS = 240
_DURATION = regex.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m(?!s))?(?:(?P<s>\d+(?:\.\d+)?)s)?$")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_LONGEST = 100 * 365 * 86400.0      # durations and times are range-checked: no infinite windows
_LATEST = 1e11                      # Unix seconds: the year 5138

LEVEL_NAMES = (*KV_USAGE, *PREEMPTIONS, *(n[:-6] + "_created" for n in PREEMPTIONS if n.endswith("_total")),
               *RUNNING, *WAITING, *SWAPPED, *CACHE_CONFIG, *PREFIX_QUERIES, *PREFIX_HITS, *PREFIX_HIT_RATE)
HISTOGRAM_NAMES = tuple(f"{base}{part}" for _, names, _ in HISTOGRAMS for base in names
                        for part in ("_bucket", "_count", "_sum")) + tuple(
    f"{base}{part}" for base in REQUEST_PREEMPTIONS for part in ("_bucket", "_count", "_sum"))
GPU_NAMES = (DCGM_USED, DCGM_FREE, DCGM_RESERVED)


def parse_duration(text: str, flag: str) -> float:
    """`90s`, `15m`, `1h30m`, `2d`, or plain seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        m = _DURATION.match(text)
        if not text or not m or not any(m.groupdict().values()):
            raise InputError(flag, f"{text!r} is not a duration", "e.g. 90s, 15m, 1h, 1h30m, 2d") from None
        seconds = sum(float(v) * _UNITS[k] for k, v in m.groupdict().items() if v)
    if not seconds > 0:
        raise InputError(flag, f"{text!r} is not a positive duration", "e.g. 15m")
    if not 1e-3 <= seconds <= _LONGEST:
        raise InputError(flag, f"{text!r} is not a duration Prometheus keeps", "from 1ms to 100 years, e.g. 15m, 30d")
    return seconds


def parse_time(text: str, flag: str, now: float) -> float:
    """`now`, Unix seconds, or RFC 3339 / ISO 8601 (no zone means UTC)."""
    text = text.strip()
    if text == "now":
        return now
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not 0 <= seconds <= _LATEST:      # NaN fails too
            raise InputError(flag, f"{text!r} is not a time", "use now, Unix seconds or 2025-01-31T14:05:00Z")
        return seconds
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(flag, f"{text!r} is not a time", "use now, Unix seconds or 2025-01-31T14:05:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    step: float


def query_window(since: str | None, until: str | None, at: str | None, step: str | None, now: float) -> Window:
    """`--since` (a duration before the end, or a start time), `--until` (default now), or `--at` alone."""
    if at is not None:
        if since is not None or until is not None:
            raise InputError("--at", "is one instant; it cannot be combined with --since or --until",
                             "use --since/--until for a window")
        when = parse_time(at, "--at", now)
        return Window(when, when, 1.0)
    end = parse_time(until, "--until", now) if until else now
    since = since or "1h"
    try:
        start = end - parse_duration(since, "--since")
    except InputError:
        try:
            start = parse_time(since, "--since", now)
        except InputError:
            raise InputError("--since", f"{since!r} is neither a duration nor a time",
                             "e.g. 1h, 30m, 1h30m or 2025-01-31T14:05:00Z") from None
    if start >= end:
        raise InputError("--since", "the window starts after it ends", "give --since a time before --until")
    span = end - start
    chosen = parse_duration(step, "--step") if step else max(1.0, math.ceil(span / MAX_STEPS))
    steps = max(1, math.ceil(span / chosen))
    return Window(end - steps * chosen, end, chosen)


def build_matchers(selector: str | None, job: str | None, instance: str | None) -> str:
    """The label matchers inside `{...}`: the selector's, plus job/instance ones."""
    parts = []
    if selector:
        inner = selector.strip()
        if inner.startswith("{") != inner.endswith("}"):
            raise InputError("--selector", f"{selector!r} has unbalanced braces",
                             "e.g. '{namespace=\"x\",pod=~\"vllm-.*\"}'")
        inner = inner[1:-1] if inner.startswith("{") else inner
        if inner.strip():
            parts.append(inner.strip().rstrip(","))
    for label, value in (("job", job), ("instance", instance)):
        if value:
            parts.append(f'{label}="{_quote(value)}"')
    return ",".join(parts)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _names_matcher(names: Sequence[str]) -> str:
    """Both spellings of each name: Prometheus may store vllm:x as vllm_x (see metricparse.canonical_name)."""
    spelled = [v for n in names for v in (n, n.replace("vllm:", "vllm_", 1))]
    return '__name__=~"' + _quote("|".join(re.escape(n) for n in dict.fromkeys(spelled))) + '"'


def _series(metric: dict[str, str]) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{metric.get('__name__', '')}{{{labels}}}"


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def fetch(base_url: str, matchers: str, window: Window, options: HttpOptions) -> tuple[list[MetricSample], list[str]]:
    """The vLLM and dcgm-exporter series over the window, and Prometheus' own warnings."""
    endpoint = base_url.rstrip("/") + "/api/v1/query_range"
    extra = f",{matchers}" if matchers else ""
    levels, level_warnings = _query(endpoint, "{" + _names_matcher(LEVEL_NAMES) + extra + "}", window, window.step,
                                    options, "the query for vLLM's gauges and counters")
    if not any(canonical_name(m.get("__name__", "")).startswith("vllm:") for m, _ in levels):
        raise InputError(display_url(base_url), f"no vLLM series match {{{matchers}}} from {iso(window.start)} to "
                         f"{iso(window.end)}",
                         "check the labels: curl -G BASE/api/v1/series --data-urlencode "
                         "'match[]={__name__=~\"vllm:.+\"}'")
    span = window.end - window.start
    histograms, histogram_warnings = _query(endpoint, "{" + _names_matcher(HISTOGRAM_NAMES) + extra + "}", window,
                                            span if span > 0 else 1.0, options,
                                            "the query for vLLM's histograms")
    pods = sorted({m["pod"] for m, _ in levels if m.get("pod")
                   and canonical_name(m.get("__name__", "")).startswith("vllm:")})
    gpu_names = _names_matcher(GPU_NAMES)
    if pods:
        regex_pods = _quote("|".join(re.escape(p) for p in pods))
        gpu_query = (f'{{{gpu_names},exported_pod=~"{regex_pods}"}} or {{{gpu_names},pod=~"{regex_pods}"}}')
    else:
        gpu_query = "{" + gpu_names + extra + "}"
    gpus, gpu_warnings = _query(endpoint, gpu_query, window, window.step, options,
                                "the query for the GPU exporter's series")
    series = levels + histograms + gpus
    times = sorted({t for _, values in series for t, _ in values})
    index = {t: i for i, t in enumerate(times)}
    samples = []
    for metric, values in series:
        name, text = canonical_name(metric.get("__name__", "")), _series(metric)
        labels = {k: v for k, v in metric.items() if k != "__name__"}
        for t, value in values:
            samples.append(MetricSample(name, labels, value, index[t], f"prometheus:{text}", 0,
                                        f"{value:g} @ {iso(t)}", t))
    return samples, list(dict.fromkeys(level_warnings + histogram_warnings + gpu_warnings))


def _query(endpoint: str, query: str, window: Window, step: float, options: HttpOptions, label: str
           ) -> tuple[list[tuple[dict[str, str], list[tuple[float, float]]]], list[str]]:
    """One query_range; `label` names the query in errors (the query itself is a long regex)."""
    shown = display_url(endpoint)
    params = {"query": query, "start": f"{window.start:.3f}", "end": f"{window.end:.3f}", "step": f"{step:g}"}
    response = get(endpoint, options, WHAT, params=params)
    try:
        body: Any = response.json()
    except (ValueError, RecursionError):
        raise InputError(shown, "did not answer JSON: this is not a Prometheus HTTP API",
                         f"give the base URL of {WHAT}") from None
    series, warnings = _checked_matrix(body, f"{shown} ({label})")
    out = []
    for metric, pairs in series:
        values = []
        for t, v in pairs:
            value, when = sample_value(v), sample_time(t)
            if value is not None and when is not None:     # NaN, infinities and absurd figures are unknown
                values.append((when, value))
        if values:
            out.append((metric, values))
    return out, [f"Prometheus: {w}" for w in warnings]


def kind_of(value: object) -> str:
    """A JSON value's kind in the words an error uses."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else type(value).__name__


def _shape_error(where: str, what: str) -> InputError:
    return InputError(where, f"answered query_range with a wrong shape: {what}",
                      f"is it {WHAT}? Prometheus answers {{\"status\": \"success\", \"data\": {{\"resultType\": "
                      "\"matrix\", \"result\": [{\"metric\": {...}, \"values\": [[time, \"value\"], ...]}]}}")


_KIND_NAMES: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}


def _field(container: dict, key: str, kind: type, path: str, where: str) -> Any:
    if key not in container:
        raise _shape_error(where, f"{path} is missing")
    value = container[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise _shape_error(where, f"{path} is {kind_of(value)}, not {_KIND_NAMES[kind]}")
    return value


def _checked_matrix(body: Any, where: str) -> tuple[list[tuple[dict[str, str], list[tuple[Any, Any]]]], list[str]]:
    """The series of a query_range answer, every part of it checked for the shape Prometheus gives: a wrong
    one is an error naming the URL, the query and the part that is wrong, never an AttributeError."""
    if not isinstance(body, dict):
        raise _shape_error(where, f"the answer is {kind_of(body)}, not an object")
    status = _field(body, "status", str, "status", where)
    if status != "success":
        error = body.get("error", "unknown error")
        shown = (error if isinstance(error, str) else json.dumps(error))[:300]
        raise InputError(where, f"Prometheus refused the query: {shown}",
                         "check --selector, e.g. '{namespace=\"x\",pod=~\"vllm-.*\"}', and --step")
    data = _field(body, "data", dict, "data", where)
    result_type = data.get("resultType")
    if result_type != "matrix":
        shown_type = result_type[:40] if isinstance(result_type, str) else kind_of(result_type)
        raise InputError(where, f"expected a matrix from query_range, got {shown_type!r}",
                         f"give the base URL of {WHAT}")
    result = _field(data, "result", list, "data.result", where)
    if len(result) > MAX_SERIES:
        raise InputError(where, f"answered with {len(result):,} series (at most {MAX_SERIES:,} are read)",
                         "select fewer: --selector '{namespace=\"x\",pod=~\"vllm-.*\"}', --job, --instance")
    series = []
    for i, item in enumerate(result):
        path = f"data.result[{i}]"
        if not isinstance(item, dict):
            raise _shape_error(where, f"{path} is {kind_of(item)}, not an object")
        metric = _field(item, "metric", dict, f"{path}.metric", where)
        for name, value in metric.items():
            if not isinstance(value, str):
                raise _shape_error(where, f"{path}.metric.{name[:60]} is {kind_of(value)}, not a string")
        pairs = _field(item, "values", list, f"{path}.values", where)
        for j, pair in enumerate(pairs):
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)
                    and isinstance(pair[0], (int, float)) and not isinstance(pair[0], bool)):
                raise _shape_error(where, f"{path}.values[{j}] is not a [time, \"value\"] pair: "
                                          f"{json.dumps(pair)[:80]}")
        series.append((dict(metric), pairs))
    warnings = body.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise _shape_error(where, f"warnings is {kind_of(warnings)}, not a list of strings"
                           if not isinstance(warnings, list) else "warnings is not a list of strings")
    return series, warnings
