"""What a report leads with, in every format: the comparison that decides the verdict, the restart
history and what users saw. The HTML report draws the same comparison (charts.decision_charts).

Selection and wording only: every figure is a fact the pipeline gave, or the weight size the report
holds (Report.weights_needed: the same estimate the weight fixes state), marked as an estimate when
the log does not print it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..model import Fact, Report, WeightsEstimate
from ..vocabulary import KV_SATURATED, OTHER_PROCESS_NOTABLE_GIB
from .common import attempts_sentence, format_value


@dataclass(frozen=True)
class Figure:
    """One side of a comparison: a labelled amount, drawn as a bar."""

    label: str
    value: float
    unit: str                    # "GiB", "tokens", "%"
    fact: str | None = None      # where it comes from (None: computed from facts, see `note`)
    note: str | None = None
    fact_estimated: str | None = None   # the fact this estimates, when the input does not give it


@dataclass(frozen=True)
class Comparison:
    """Two or more figures in one unit, drawn on one scale; `limit` is a line across (the 95 % line)."""

    title: str
    figures: tuple[Figure, ...]
    limit: Figure | None = None


@dataclass(frozen=True)
class Lead:
    decided_by: str | None                 # the deciding comparison in one sentence
    comparisons: tuple[Comparison, ...]    # the same, as figures to draw
    restarts: str | None                   # "3 of 3 startups in this input ended as weights_dont_fit; ..."
    impact: str                            # what users saw (or that the input does not say)
    timeline_decides: bool = False         # preemption: the timeline is the deciding picture


def _v(facts: Mapping[str, Fact], name: str) -> float | None:
    """A numeric fact's value as given (an int stays an int), or None."""
    fact = facts.get(name)
    return fact.value if fact is not None and isinstance(fact.value, (int, float)) \
        and not isinstance(fact.value, bool) else None


def _gib(x: float) -> str:
    return format_value(x, "GiB")


def _kv(facts: Mapping[str, Fact]) -> tuple[str | None, tuple[Comparison, ...]]:
    needed, available = _v(facts, "kv_needed_gib"), _v(facts, "kv_cache_gib")
    asked = _v(facts, "max_model_len")
    fit_name = "estimated_max_model_len" if "estimated_max_model_len" in facts else "kv_cache_tokens"
    fit = _v(facts, fit_name)
    parts, rows = [], []
    if needed is not None and available is not None:
        parts.append(f"KV cache: {_gib(needed)} needed, {_gib(available)} available")
        rows.append(Comparison("KV cache for one request of max_model_len, GiB", (
            Figure("needed", needed, "GiB", "kv_needed_gib"), Figure("available", available, "GiB", "kv_cache_gib"))))
    elif available is not None and available <= 0:
        parts.append(f"no memory left for the KV cache ({_gib(available)} after weights and activations)")
    if asked is not None and fit is not None:
        parts.append(f"{int(fit):,} of the {int(asked):,} tokens asked (max_model_len) fit"
                     if not parts else f"{int(fit):,} of the {int(asked):,} tokens asked fit")
        rows.append(Comparison("One request's length, tokens", (
            Figure("asked (max_model_len)", asked, "tokens", "max_model_len"),
            Figure("fits in the KV cache", fit, "tokens", fit_name))))
    return ("; ".join(parts) or None), tuple(rows)


def _weights(facts: Mapping[str, Fact], needed: WeightsEstimate | None) -> tuple[str | None, tuple[Comparison, ...]]:
    if needed is None:
        return None, ()
    total, how, lower_bound = needed.gib, needed.how, needed.lower_bound
    tp = _v(facts, "tensor_parallel_size") or 1
    budget = _v(facts, "budget_gib")
    if not total:
        return None, ()
    per_gpu = total / tp
    estimated = "weights_gib" not in facts
    size = (f"{'at least ' if lower_bound else 'about ' if estimated else ''}{_gib(per_gpu)} of weights per GPU"
            + (f" ({how})" if estimated else ""))
    weights = Figure("weights per GPU" + (" (estimate)" if estimated else ""), per_gpu, "GiB",
                     None if estimated else "weights_gib", how if estimated else None,
                     "weights_gib" if estimated else None)
    if budget is None:
        return size, ()
    return (f"{size} vs a budget of {_gib(budget)} per GPU",
            (Comparison("Weights vs vLLM's budget, per GPU, GiB",
                        (weights, Figure("budget (utilization x GPU)", budget, "GiB", "budget_gib"))),))


def _external(facts: Mapping[str, Fact]) -> tuple[str | None, tuple[Comparison, ...]]:
    other, total, budget = _v(facts, "other_processes_gib"), _v(facts, "gpu_total_gib"), _v(facts, "budget_gib")
    free, requested = _v(facts, "free_gib"), _v(facts, "requested_gib")
    tried, beyond = _v(facts, "tried_to_allocate_gib"), _v(facts, "gpu_memory_beyond_budget_gib")
    kind = facts.get("failure_kind")
    if kind is not None and kind.value == "free_memory_low" and free is not None and requested is not None:
        return (f"vLLM asked for {_gib(requested)} at startup, but only {_gib(free)} was free",
                (Comparison("Free memory at startup vs vLLM's request, GiB", (
                    Figure("free", free, "GiB", "free_gib"),
                    Figure("vLLM asked for", requested, "GiB", "requested_gib"))),))
    if other is not None and other >= OTHER_PROCESS_NOTABLE_GIB and total is not None and budget is not None:
        headroom = max(total - budget, 0.0)
        if other > headroom:
            sentence = (f"other processes held {_gib(other)}, more than the {_gib(headroom)} that vLLM's budget "
                        "leaves of the GPU: the budget and they cannot both fit")
        else:
            sentence = (f"other processes held {_gib(other)} of the {_gib(headroom)} that vLLM's budget leaves of the "
                        f"GPU, leaving only {_gib(headroom - other)} for what vLLM allocates outside its budget")
        return (sentence,
                (Comparison("Other processes vs what vLLM's budget leaves of the GPU, GiB", (
                    Figure("held by other processes", other, "GiB", "other_processes_gib"),
                    Figure("left outside the budget (GPU - budget)", headroom, "GiB", None,
                           "the GPU's total memory minus vLLM's budget (utilization x GPU)"))),))
    if beyond is not None:
        return (f"{_gib(beyond)} of GPU memory in use beyond vLLM's reservation", ())
    if tried is not None and free is not None:
        return (f"an allocation of {_gib(tried)} failed with {_gib(free)} free",
                (Comparison("The allocation that failed vs free memory, GiB", (
                    Figure("asked for", tried, "GiB", "tried_to_allocate_gib"),
                    Figure("free", free, "GiB", "free_gib"))),))
    return None, ()


def _kv_usage(facts: Mapping[str, Fact]) -> Comparison | None:
    peak = _v(facts, "kv_cache_usage_max")
    if peak is None:
        return None
    return Comparison("KV cache usage, peak, %", (Figure("peak", 100 * peak, "%", "kv_cache_usage_max"),),
                      Figure("saturated", 100 * KV_SATURATED, "%"))


def _preemption(facts: Mapping[str, Fact]) -> tuple[str | None, tuple[Comparison, ...]]:
    """Preemptions counted, a full cache, a queue: a KV peak below the saturation line is no evidence of
    preemption, so neither the sentence nor the chart shows it."""
    count, rate = _v(facts, "preemptions"), _v(facts, "preemption_rate_per_min")
    peak, waiting = _v(facts, "kv_cache_usage_max"), _v(facts, "waiting_max")
    parts = []
    if count is not None:
        parts.append(f"{format_value(int(count), 'preemptions')}"
                     + (f" ({format_value(rate, 'per minute')})" if rate is not None else ""))
    if peak is not None and peak >= KV_SATURATED:
        parts.append(f"KV cache peaked at {100 * peak:.3g} % (saturated from {100 * KV_SATURATED:.0f} %)")
    if waiting:
        parts.append(f"up to {format_value(int(waiting), 'requests')} waiting")
    row = _kv_usage(facts) if peak is not None and peak >= KV_SATURATED else None
    return ("; ".join(parts) or None), ((row,) if row else ())


def _healthy(facts: Mapping[str, Fact]) -> tuple[str | None, tuple[Comparison, ...]]:
    """What earned the verdict: the queue drained, the cache stayed below the line, preemption stayed rare. A peak
    at or above the line argues for saturation, so it is not what decided."""
    peak, count, end = _v(facts, "kv_cache_usage_max"), _v(facts, "preemptions"), _v(facts, "waiting_at_end")
    parts = []
    if end is not None:
        parts.append("the queue drained: no request waiting at the end" if not end
                     else f"{format_value(int(end), 'requests')} waiting at the end, not a lasting queue")
    if peak is not None and peak < KV_SATURATED:
        parts.append(f"KV cache peaked at {100 * peak:.3g} %, below the {100 * KV_SATURATED:.0f} % saturation line")
    if count is not None:
        parts.append(f"preemptions: {int(count):,}")
    row = _kv_usage(facts) if peak is not None and peak < KV_SATURATED else None
    return ("; ".join(parts) or None), ((row,) if row else ())


def _other(facts: Mapping[str, Fact]) -> tuple[str | None, tuple[Comparison, ...]]:
    kind, phase = facts.get("failure_kind"), facts.get("failed_phase")
    if kind is None:
        return None, ()
    return f"the failure is {kind.value}" + (f", during {phase.value}" if phase else "") + ", not a memory error", ()


def _inconclusive(facts: Mapping[str, Fact]) -> tuple[str | None, tuple[Comparison, ...]]:
    """Only when no rule decided (an inconclusive rule states its own decided_by)."""
    return "nothing: no rule could decide from this input (Not assessed says what is missing)", ()


_DECIDERS = {"inconclusive": _inconclusive,
             "kv_cache_too_small": _kv, "external_pressure": _external,
             "preemption_slowdown": _preemption, "healthy": _healthy, "other_failure": _other}

# What users saw, from the metrics' histograms and the log's queue: (fact, words)
_IMPACT = (("ttft_p95_seconds", "time to first token p95"), ("queue_time_p95_seconds", "queue time p95"),
           ("e2e_latency_p95_seconds", "end-to-end latency p95"))


# A KV cache too small is decided from figures vLLM checks before it starts: it refused to start, whether or not
# the excerpt kept the error line.
_REFUSED_TO_START = "kv_cache_too_small"


def impact(facts: Mapping[str, Fact], verdict: str | None = None) -> str:
    """What the users of the server saw: it never started, or its latency and queue."""
    up = facts.get("server_up")
    phase = facts.get("failed_phase")
    started = up is not None and up.value is True
    if not started and ((phase is not None and phase.value != "serving")
                        or (phase is None and verdict == _REFUSED_TO_START and "stats_lines" not in facts)):
        return "the server never started: no request was served"
    parts = [f"{words} {format_value(facts[name].value, 'seconds')}" for name, words in _IMPACT if name in facts]
    share = _v(facts, "requests_preempted_share")
    if share:
        parts.append(f"{share:.0%} of requests preempted")
    waiting = _v(facts, "waiting_max")
    if waiting:
        parts.append(f"up to {format_value(int(waiting), 'requests')} waiting")
    if phase is not None and phase.value == "serving":
        parts.insert(0, "the server failed while serving: requests in flight failed")
    if not parts:
        vllm = facts.get("vllm_lines")
        if vllm is not None and vllm.value == 0 and "metrics_snapshots" not in facts:
            return "not known: the input holds no vLLM output"
        if "metrics_snapshots" in facts:
            return "latency not known: the /metrics given have no latency histograms"
        return "latency not known: the input has no latency figures (saved /metrics give them: --metrics)"
    return ", ".join(parts)


def lead(report: Report) -> Lead:
    """The comparison that decided: the deciding rule's own (`decided_by` in its file) where it states one, else
    the verdict's; the figures drawn are the verdict's, never one that argues for another verdict."""
    d = report.diagnosis
    if d.verdict == "weights_dont_fit":
        decided, rows = _weights(d.facts, report.weights_needed)
    else:
        decided, rows = _DECIDERS.get(d.verdict, lambda _: (None, ()))(d.facts)
    deciding = next((f for f in d.findings if d.rule_path and f.rule_id == d.rule_path[-1]), None)
    if deciding is not None and deciding.decided_by:
        decided = deciding.decided_by
    return Lead(decided, rows, attempts_sentence(report), impact(d.facts, d.verdict),
                timeline_decides=d.verdict == "preemption_slowdown" and bool(report.timeline))
