"""`vtriage diff BEFORE AFTER`: did the fix work? Two reports of one server, side by side.

Pure: two Reports in, a Comparison out (the renderers in triage/render/diff.py print it). It
compares the verdicts, the KV headroom, preemption, concurrency, and every setting that changed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..decide.ruleset import VerdictClass
from ..model import Report
from ..vocabulary import SEVERITIES

# (section, [(fact, which way is better: "up", "down" or None for neither)])
SECTIONS: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...] = (
    ("KV headroom", (("kv_cache_tokens", "up"), ("max_concurrency", "up"), ("kv_cache_gib", "up"),
                     ("estimated_max_model_len", "up"),
                     ("kv_cache_usage_max", "down"), ("saturated_intervals", "down"))),
    ("Preemption", (("preemptions", "down"), ("preemption_rate_per_min", "down"))),
    ("Concurrency", (("running_max", None), ("running_at_saturation", None), ("waiting_max", "down"))),
    ("Memory", (("weights_gib", None), ("other_processes_gib", "down"), ("free_gib", "up"))),
)
SETTINGS = ("vllm_version", "engine", "model", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size",
            "pipeline_parallel_size", "max_num_seqs", "max_num_batched_tokens", "dtype", "quantization",
            "kv_cache_dtype", "enforce_eager", "enable_prefix_caching", "block_size")


@dataclass(frozen=True)
class Row:
    fact: str
    unit: str | None
    before: Any                  # None: not in that input (unknown, never zero)
    after: Any
    change: str                  # "better", "worse", "changed", "same", "only before", "only after", "unknown"


@dataclass(frozen=True)
class Comparison:
    outcome: str                 # "fixed", "not fixed", "regressed", "changed", "still healthy", "unknown"
    headline: str
    before: Report
    after: Report
    sections: tuple[tuple[str, tuple[Row, ...]], ...]
    settings_changed: tuple[Row, ...]
    settings_same: tuple[str, ...]
    warnings: tuple[str, ...] = ()   # e.g. BEFORE and AFTER look like two deployments, not one server


def _value(report: Report, fact: str) -> Any:
    got = report.diagnosis.facts.get(fact)
    return None if got is None else got.value


def _unit(before: Report, after: Report, fact: str) -> str | None:
    got = before.diagnosis.facts.get(fact) or after.diagnosis.facts.get(fact)
    return got.unit if got else None


def _change(before: Any, after: Any, better: str | None) -> str:
    if before is None or after is None:
        return "unknown" if before is None and after is None else "only after" if before is None else "only before"
    if before == after:
        return "same"
    if better is None or not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
        return "changed"
    return "better" if (after > before) == (better == "up") else "worse"


def _outcome(before: Report, after: Report, classes: Mapping[str, VerdictClass]) -> tuple[str, str]:
    b, a = before.diagnosis.verdict, after.diagnosis.verdict
    rank = {v: SEVERITIES.index(c.severity) for v, c in classes.items()}
    problem = SEVERITIES.index("warning")
    if a == "inconclusive":
        return "unknown", f"cannot tell: AFTER is inconclusive (BEFORE was {b})"
    if rank[b] >= problem and a == "healthy":
        return "fixed", f"FIXED: {b} -> healthy"
    if b == a == "healthy":
        return "still healthy", "STILL HEALTHY: healthy -> healthy"
    if b == a:
        return "not fixed", f"NOT FIXED: still {a}"
    if rank[a] > rank[b] or b in ("healthy", "inconclusive"):
        return "regressed", f"REGRESSED: {b} -> {a}"
    return "changed", f"CHANGED: {b} -> {a} (the first problem is gone; this is another)"


# What makes two logs two deployments rather than one server before and after a change.
IDENTITY = (("model", "model"), ("vllm_version", "vLLM version"), ("gpu_total_gib", "GPU memory"))


def deployment_warnings(before: Report, after: Report) -> tuple[str, ...]:
    """A diff is read as "did the change work": say so when the two sides are not the same server."""
    differ = []
    for fact, label in IDENTITY:
        b, a = _value(before, fact), _value(after, fact)
        if b is not None and a is not None and b != a and not (fact == "gpu_total_gib" and abs(b - a) < 0.5):
            unit = " GiB" if fact == "gpu_total_gib" else ""
            differ.append(f"{label} {b}{unit} vs {a}{unit}")
    if not differ:
        return ()
    return (f"BEFORE and AFTER look like different deployments ({'; '.join(differ)}): the comparison is only "
            "a before/after if that was the change you made",)


def compare(before: Report, after: Report, classes: Mapping[str, VerdictClass]) -> Comparison:
    sections = []
    for title, facts in SECTIONS:
        rows = tuple(Row(fact, _unit(before, after, fact), _value(before, fact), _value(after, fact),
                         _change(_value(before, fact), _value(after, fact), better)) for fact, better in facts)
        rows = tuple(r for r in rows if r.change != "unknown")
        if rows:
            sections.append((title, rows))
    settings = [Row(f, _unit(before, after, f), _value(before, f), _value(after, f),
                    _change(_value(before, f), _value(after, f), None)) for f in SETTINGS]
    outcome, headline = _outcome(before, after, classes)
    return Comparison(outcome=outcome, headline=headline, before=before, after=after, sections=tuple(sections),
                      settings_changed=tuple(r for r in settings if r.change not in ("same", "unknown")),
                      settings_same=tuple(r.fact for r in settings if r.change == "same"),
                      warnings=deployment_warnings(before, after))
