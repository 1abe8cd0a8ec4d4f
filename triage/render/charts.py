"""Geometry for the HTML report's pictures: where each bar, line and marker goes.

Layout only. Every number shown comes from a fact or a stats point as the pipeline gave it; here they
are only scaled to a width. An absent figure is listed as unknown and never drawn (drawing it as zero
would claim a figure the input does not hold).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..model import Fact, RankMemory, SourceRef, TimelinePoint
from ..vocabulary import KV_SATURATED
from .common import MEMORY_PARTS, format_value
from .decision import Comparison

VIEW_WIDTH = 1000.0     # SVG user units across every chart
CHART_HEIGHT = 100.0


@dataclass(frozen=True)
class Segment:
    """One labelled stretch of a memory bar; x and width are % of the bar (None: unknown, not drawn)."""

    key: str
    label: str
    fact: Fact | None
    x: float | None = None
    width: float | None = None
    note: str | None = None
    estimate: bool = False      # not in the input: the report's estimate, drawn apart

    @property
    def where(self) -> SourceRef | None:
        return self.fact.evidence[0] if self.fact and self.fact.evidence else None


@dataclass(frozen=True)
class Marker:
    label: str
    x: float            # % of the bar


@dataclass(frozen=True)
class MemoryBar:
    title: str
    caption: str
    segments: tuple[Segment, ...]       # every part, known or not, in reading order (the legend)
    markers: tuple[Marker, ...]
    attempt: Segment | None = None      # the allocation that failed, drawn as an outline from the free part
    open_from: float | None = None      # total unknown: from here (%) to the end the GPU is drawn as unknown

    @property
    def drawn(self) -> tuple[Segment, ...]:
        return tuple(s for s in self.segments if s.width)


@dataclass(frozen=True)
class RankBar:
    rank: RankMemory
    weights: tuple[float, float] | None   # (x, width) in %
    kv: tuple[float, float] | None
    held: tuple[float, float] | None


@dataclass(frozen=True)
class MemoryPicture:
    bars: tuple[MemoryBar, ...]
    scale_note: str
    unknown: tuple[str, ...]
    ranks: tuple[RankBar, ...] = ()
    ranks_same: bool = False
    axis: tuple["Tick", ...] = ()          # GiB from 0 under every bar, all drawn to one scale


def _value(facts: Mapping[str, Fact], name: str) -> float | None:
    fact = facts.get(name)
    return float(fact.value) if fact is not None and isinstance(fact.value, (int, float)) else None


def _pct(gib: float, scale: float) -> float:
    return round(100.0 * gib / scale, 3)


def memory_picture(facts: Mapping[str, Fact], ranks: Sequence[RankMemory] = (),
                   estimated: Mapping[str, Fact] | None = None) -> MemoryPicture | None:
    """The GPU as the incident's own figures describe it, or None when the input gives no memory figure.
    `estimated`: parts the log does not print but the report estimates (the weights of a startup that
    died loading them, as the fix states them), drawn and labelled as estimates."""
    estimated = {k: v for k, v in (estimated or {}).items() if k not in facts}
    facts = {**facts, **estimated}
    total, budget = _value(facts, "gpu_total_gib"), _value(facts, "budget_gib")
    util = facts.get("gpu_memory_utilization")
    parts = [(name, label, _value(facts, name)) for name, label in MEMORY_PARTS]
    this, other, free = (_value(facts, n) for n in ("this_process_gib", "other_processes_gib", "free_gib"))
    tried = _value(facts, "tried_to_allocate_gib")
    known_parts = sum(v for _, _, v in parts if v and v > 0)
    at_oom = sum(v for v in (this, other, free, tried) if v and v > 0)
    if not (known_parts or at_oom or total or budget or ranks):
        return None
    scale = max(total or 0.0, budget or 0.0, known_parts + (other or 0.0), at_oom) or 1.0
    if not total:
        scale *= 1.15    # room for the unknown rest of the GPU, drawn as unknown
    scale_note = ("Drawn to scale: the full width is the GPU's total memory." if total and scale == total else
                  "Drawn to scale; what reaches past the GPU total line did not fit on the GPU." if total else
                  "The GPU's total memory is unknown: the bars are drawn to the scale of the figures that are known.")
    markers = []
    if budget:
        util_text = f"{util.value:g} × GPU = " if util is not None else ""
        markers.append(Marker(f"budget: {util_text}{budget:,.2f} GiB", _pct(budget, scale)))
    if total:
        markers.append(Marker(f"GPU total {total:,.2f} GiB", _pct(total, scale)))

    plan: list[Segment] = []
    cursor = 0.0
    for name, label, gib in parts:
        fact = facts.get(name)
        if name in estimated:
            plan.append(Segment(name, f"{label} (estimate)", fact, _pct(cursor, scale), _pct(gib or 0.0, scale),
                                note=fact.note if fact else None, estimate=True))
            cursor += gib or 0.0
        elif gib is None:
            plan.append(Segment(name, label, None))
        elif gib <= 0:
            plan.append(Segment(name, label, fact, note="negative: the other parts already exceed the budget"
                                if gib < 0 else None))
        else:
            plan.append(Segment(name, label, fact, _pct(cursor, scale), _pct(gib, scale)))
            cursor += gib
    plan.append(_outside(facts, "other_processes_gib", "Other processes", other, total, scale, cursor))
    plan.append(Segment("headroom", "Headroom", None,
                        note="the rest of the GPU, drawn as the empty track; the input gives no figure for it"))
    bars = [MemoryBar("vLLM's budget, as sized at startup",
                      "Weights, activation peak and non-torch memory come out of the budget first and the KV cache "
                      "gets the rest. Before vLLM 0.21 CUDA graphs are captured after that, outside the budget, so "
                      "the stack can pass the budget line by their size.", tuple(plan), tuple(markers),
                      open_from=None if total else _pct(cursor + (other or 0.0), scale))]

    # The second bar is the moment a failure refused memory: free memory vLLM printed at a startup that went on is
    # not such a moment.
    if "failure_kind" in facts and (this is not None or other is not None or free is not None):
        oom = [_segment(facts, "this_process_gib", "This vLLM process", this, 0.0, scale)]
        free_x = (total - free if total and free is not None else (this or 0.0) + (other or 0.0))
        other_x = (free_x - other if total and free is not None and other is not None else this or 0.0)
        unsure = _value(facts, "unidentified_processes_gib")
        if unsure is not None:      # torch's `Process N` entries that may be vLLM under its host PID, where vLLM is
            oom.append(_segment(facts, "unidentified_processes_gib", "Process(es) that may be vLLM itself (the "
                                "log cannot tell)", unsure, this or 0.0, scale))
        if unsure is not None and other is not None and (this or 0.0) + unsure > other_x + 0.01:
            oom.append(Segment("other_processes_gib", "Other processes", facts.get("other_processes_gib"),
                               note="part of the processes that may be vLLM itself, drawn there"))
        else:
            oom.append(_segment(facts, "other_processes_gib", "Other processes", other, other_x, scale))
        oom.append(_segment(facts, "free_gib", "Free", free, free_x, scale))
        attempt = None
        if tried is not None and free is not None:
            attempt = Segment("attempt", "The allocation that failed", facts.get("tried_to_allocate_gib"),
                              _pct(free_x, scale), _pct(tried, scale))
        elif tried is not None:
            oom.append(Segment("attempt", "The allocation that failed", facts.get("tried_to_allocate_gib")))
        bars.append(MemoryBar("At the out-of-memory error",
                              "What torch's error says the GPU held when the allocation was refused.",
                              tuple(oom), tuple(markers), attempt,
                              open_from=None if total else _pct(at_oom, scale)))
        if not known_parts:     # nothing of the plan is known: its bar would be an empty track
            bars.pop(0)

    unknown = (("GPU total",) if total is None else ()) + (("budget",) if budget is None else ())
    unknown += tuple(label for name, label in MEMORY_PARTS if name not in facts)
    unknown += tuple(dict.fromkeys(s.label for bar in bars for s in bar.segments
                                   if s.fact is None and s.key != "headroom" and s.label not in unknown))
    rank_bars, same = _rank_bars(ranks, scale)
    return MemoryPicture(tuple(bars), scale_note, unknown, rank_bars, same, _gib_axis(scale))


def _gib_axis(scale: float) -> tuple["Tick", ...]:
    """Round GiB ticks from 0 across a bar `scale` GiB wide; the unit on the last."""
    step = nice_top(scale / 5)
    values = [k * step for k in range(int(scale / step) + 1)]
    return tuple(Tick(_pct(v, scale), _tick(v, "GiB" if v == values[-1] else "")) for v in values)


def _segment(facts: Mapping[str, Fact], name: str, label: str, gib: float | None, x: float, scale: float) -> Segment:
    if gib is None:
        return Segment(name, label, None)
    return Segment(name, label, facts.get(name), _pct(x, scale), _pct(max(gib, 0.0), scale))


def _outside(facts: Mapping[str, Fact], name: str, label: str, gib: float | None, total: float | None,
             scale: float, cursor: float) -> Segment:
    """Memory outside vLLM sits at the far end of the GPU when the total is known, else after vLLM's parts."""
    if gib is None:
        return Segment(name, label, None)
    x = total - gib if total and total - gib >= cursor else cursor
    return _segment(facts, name, label, gib, x, scale)


def _rank_bars(ranks: Sequence[RankMemory], scale: float) -> tuple[tuple[RankBar, ...], bool]:
    if len(ranks) < 2:
        return (), False
    figures = {(r.weights_gib, r.kv_cache_gib, r.this_process_gib) for r in ranks}
    top = max([scale, *(v for r in ranks for v in (r.this_process_gib, (r.weights_gib or 0) + (r.kv_cache_gib or 0))
                        if v)])
    bars = []
    for r in ranks:
        w = (0.0, _pct(r.weights_gib, top)) if r.weights_gib and r.weights_gib > 0 else None
        kv = ((w[1] if w else 0.0), _pct(r.kv_cache_gib, top)) if r.kv_cache_gib and r.kv_cache_gib > 0 else None
        held = (0.0, _pct(r.this_process_gib, top)) if r.this_process_gib and r.this_process_gib > 0 else None
        bars.append(RankBar(r, w, kv, held))
    return tuple(bars), len(figures) == 1


# --- timelines ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Series:
    key: str
    label: str
    kind: str          # "area" | "line" | "bars"
    path: str          # SVG path data in the chart's viewBox
    outline: str = ""  # an area's top edge, stroked on its own


@dataclass(frozen=True)
class Tick:
    x: float           # %
    label: str


@dataclass(frozen=True)
class TimeChart:
    key: str
    title: str
    y_label: str                       # the unit of the y axis: "%", "requests", "preemptions"
    series: tuple[Series, ...]
    missing: str | None = None         # why there is nothing to draw
    y_ticks: tuple[tuple[float, str], ...] = ()   # (y in the viewBox, label): 0 at the bottom, the top
    limit: tuple[float, str] | None = None        # a horizontal line (y in the viewBox, label): the 95 % line
    ticks: tuple[Tick, ...] = ()       # its own x axis, when it is not the timeline's (the /metrics chart)
    note: str | None = None            # where the figures come from, when not the stats lines


@dataclass(frozen=True)
class Timeline:
    charts: tuple[TimeChart, ...]
    points: int
    step: str                      # what one point is: a stats interval or a /metrics snapshot
    ticks: tuple[Tick, ...]
    failure_x: float | None        # %
    failure: SourceRef | None
    failure_note: str | None


def _xs(n: int) -> list[float]:
    return [VIEW_WIDTH / 2] if n == 1 else [VIEW_WIDTH * i / (n - 1) for i in range(n)]


def _y(value: float, top: float) -> float:
    return round(CHART_HEIGHT - (CHART_HEIGHT - 2) * value / top, 2) if top else CHART_HEIGHT


def _runs(values: Sequence[float | None], xs: Sequence[float], top: float) -> list[list[tuple[float, float]]]:
    runs: list[list[tuple[float, float]]] = [[]]
    for x, v in zip(xs, values):
        if v is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((round(x, 2), _y(v, top)))
    return [r for r in runs if r]


def _line_path(values: Sequence[float | None], xs: Sequence[float], top: float) -> str:
    out = []
    for run in _runs(values, xs, top):
        if len(run) == 1:
            run = [(run[0][0] - 2, run[0][1]), (run[0][0] + 2, run[0][1])]
        out.append("M" + " L".join(f"{x:g} {y:g}" for x, y in run))
    return " ".join(out)


def _area_path(values: Sequence[float | None], xs: Sequence[float], top: float) -> str:
    out = []
    for run in _runs(values, xs, top):
        if len(run) == 1:
            run = [(run[0][0] - 2, run[0][1]), (run[0][0] + 2, run[0][1])]
        body = " L".join(f"{x:g} {y:g}" for x, y in run)
        out.append(f"M{run[0][0]:g} {CHART_HEIGHT:g} L{body} L{run[-1][0]:g} {CHART_HEIGHT:g} Z")
    return " ".join(out)


def _bars_path(values: Sequence[float | None], xs: Sequence[float], top: float) -> str:
    width = max(1.5, min(12.0, 0.7 * VIEW_WIDTH / max(len(xs), 1)))
    out = []
    for x, v in zip(xs, values):
        if v:
            left, right = max(0.0, x - width / 2), min(VIEW_WIDTH, x + width / 2)
            out.append(f"M{left:.2f} {CHART_HEIGHT:g} V{_y(v, top):g} H{right:.2f} V{CHART_HEIGHT:g} Z")
    return " ".join(out)


def _failure_position(points: Sequence[TimelinePoint], failure: SourceRef | None) -> tuple[float | None, str | None]:
    """Where the failure falls among the stats lines, by line order in the same file."""
    if failure is None or not points:
        return None, None
    same_file = [p for p in points if p.source.path == failure.path]
    if len(same_file) != len(points):
        return 100.0, "The failure is in another input; it is marked at the end."
    before = sum(1 for p in points if p.source.line < failure.line)
    n = len(points)
    if before == 0:
        return 0.0, "The failure comes before the first stats line."
    if before >= n:
        return 100.0, ("The failure comes after the last stats line."
                       if n > 1 else "The failure comes after the only stats line.")
    if n == 1:
        return 50.0, None
    return round(100.0 * (before - 0.5) / (n - 1), 3), None


def _y_ticks(top: float, unit: str) -> tuple[tuple[float, str], ...]:
    return ((CHART_HEIGHT, f"0 {unit}"), (_y(top, top), f"{top:,.0f} {unit}"))


def _x_ticks(points: Sequence[TimelinePoint]) -> tuple[Tick, ...]:
    n = len(points)
    picks = sorted({round(k * (n - 1) / 4) for k in range(5)}) if n > 1 else [0]
    return tuple(Tick(round(100.0 * (i / (n - 1) if n > 1 else 0.5), 3), _x_label(points[i])) for i in picks)


def _x_label(point: TimelinePoint) -> str:
    """The time, or else the file's own name and line: a full path as an axis label runs off a phone screen."""
    if point.time:
        return point.time
    name = point.source.path.replace("\\", "/").rsplit("/", 1)[-1]
    return name if point.source.line == 0 else f"{name}:{point.source.line}"


def _preemption_chart(values: Sequence[float | None], xs: Sequence[float], scraped: Sequence[TimelinePoint],
                      metrics_given: bool) -> TimeChart:
    """Preemptions per step: from the stats lines, or else from /metrics counter deltas (V1 before 0.11.1
    logs none, but its vllm:num_preemptions_total counts them)."""
    top = max([v for v in values if v is not None] or [0.0])
    title = "Preemptions per interval"
    if top > 0:
        return TimeChart("preemptions", title, "preemptions",
                         (Series("preemptions", "preemptions", "bars", _bars_path(values, xs, top)),),
                         y_ticks=_y_ticks(top, "preemptions"))
    deltas = [None if p.preemptions is None else float(p.preemptions) for p in scraped]
    scraped_top = max([v for v in deltas if v is not None] or [0.0])
    if scraped_top > 0:
        sx = _xs(len(scraped))
        return TimeChart("preemptions", "Preemptions between /metrics snapshots", "preemptions",
                         (Series("preemptions", "preemptions", "bars", _bars_path(deltas, sx, scraped_top)),),
                         y_ticks=_y_ticks(scraped_top, "preemptions"), ticks=_x_ticks(scraped),
                         note=f"from vllm:num_preemptions_total: +{sum(v or 0 for v in deltas):,.0f} over "
                              f"{len(scraped)} snapshots (its own time axis; the log's stats lines do not count them)")
    if any(v is not None for v in values) or any(v is not None for v in deltas):
        return TimeChart("preemptions", title, "", (), "none in the stats lines or metrics")
    metrics = ("the /metrics given hold no preemption count between two snapshots" if metrics_given else
               "no /metrics snapshots were given (two or more with --metrics count them)")
    return TimeChart("preemptions", title, "", (), "these stats lines do not count preemptions (V1 prints them from "
                                                   f"0.11.1; V0 logs a warning line instead), and {metrics}")


def timeline(points: Sequence[TimelinePoint], failure: SourceRef | None,
             metric_paths: frozenset[str] = frozenset(),
             scraped: Sequence[TimelinePoint] = ()) -> Timeline | None:
    """Three small charts on one x axis (one step per stats interval or snapshot): KV usage with the
    95 % saturation line, requests running and waiting, preemptions (from /metrics when the log has none)."""
    if not points:
        return None
    step = "/metrics snapshot" if all(p.source.path in metric_paths for p in points) else "stats interval"
    xs = _xs(len(points))
    kv = [None if p.kv_cache_usage is None else 100.0 * p.kv_cache_usage for p in points]
    running = [None if p.running is None else float(p.running) for p in points]
    waiting = [None if p.waiting is None else float(p.waiting) for p in points]
    preempted = [None if p.preemptions is None else float(p.preemptions) for p in points]
    charts = []
    if any(v is not None for v in kv):
        charts.append(TimeChart("kv", "KV cache usage", "%", (Series(
            "kv", "KV cache usage", "area", _area_path(kv, xs, 100.0), _line_path(kv, xs, 100.0)),),
            y_ticks=_y_ticks(100.0, "%"), limit=(_y(100.0 * KV_SATURATED, 100.0),
                                                 f"{100 * KV_SATURATED:.0f} %: saturated")))
    else:
        charts.append(TimeChart("kv", "KV cache usage", "", (), "the stats lines do not give KV cache usage"))
    top = max([v for v in (*running, *waiting) if v is not None] or [0.0])
    if top > 0:
        charts.append(TimeChart("requests", "Requests running and waiting", "requests", (
            Series("running", "running", "line", _line_path(running, xs, top)),
            Series("waiting", "waiting", "line", _line_path(waiting, xs, top))), y_ticks=_y_ticks(top, "requests")))
    elif any(v is not None for v in (*running, *waiting)):
        charts.append(TimeChart("requests", "Requests running and waiting", "", (), "no request ran or waited"))
    else:
        charts.append(TimeChart("requests", "Requests running and waiting", "", (),
                                "the stats lines do not give request counts"))
    charts.append(_preemption_chart(preempted, xs, scraped, bool(metric_paths)))
    failure_x, note = _failure_position(points, failure)
    return Timeline(tuple(charts), len(points), step, _x_ticks(points), failure_x, failure, note)


# --- the deciding comparison ------------------------------------------------------------------------

@dataclass(frozen=True)
class BarRow:
    label: str
    value: str           # the figure with its unit
    width: float         # % of the axis
    fact: str | None
    note: str | None


@dataclass(frozen=True)
class DecisionChart:
    """One comparison as horizontal bars on a labelled axis from 0, with a limit line when it has one."""

    title: str
    rows: tuple[BarRow, ...]
    axis: tuple[Tick, ...]
    limit: Tick | None = None


def nice_top(value: float) -> float:
    """The axis end: the smallest 1, 2, 2.5 or 5 x 10^k not below `value`."""
    if value <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 2, 2.5, 5, 10) if m * scale >= value)


def decision_charts(comparisons: Sequence[Comparison]) -> tuple[DecisionChart, ...]:
    out = []
    for c in comparisons:
        values = [f.value for f in c.figures] + ([c.limit.value] if c.limit else [])
        top = 100.0 if all(f.unit == "%" for f in c.figures) else nice_top(max(values))
        unit = c.figures[0].unit

        def pct(v: float, top: float = top) -> float:
            return round(max(0.0, min(100.0, 100.0 * v / top)), 3)
        rows = tuple(BarRow(f.label, _amount(f.value, f.unit), pct(f.value), f.fact, f.note) for f in c.figures)
        axis = tuple(Tick(100.0 * k / 4, _tick(top * k / 4, unit if k == 4 else "")) for k in range(5))
        limit = Tick(pct(c.limit.value), f"{c.limit.label} from {_amount(c.limit.value, c.limit.unit)}") \
            if c.limit else None
        out.append(DecisionChart(c.title, rows, axis, limit))
    return tuple(out)


def _amount(value: float, unit: str) -> str:
    """A bar's figure, as the sentence above the chart writes it."""
    return f"{value:.3g} %" if unit == "%" else format_value(value, unit)


def _tick(value: float, unit: str) -> str:
    """An axis label, short enough for a phone: 0, 2.5, 50k, 200k tokens (the unit on the last one)."""
    if value >= 10_000:
        text = f"{value / 1000:,.4g}k"
    else:
        text = f"{value:,.0f}" if value == int(value) else f"{value:,.3g}"
    return f"{text} {unit}".rstrip()
