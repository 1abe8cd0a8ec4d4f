"""What the human-facing renderers (Markdown, HTML) share: names for verdicts, how a figure is written,
which facts matter most. Formatting only: nothing here derives a figure the rules did not give."""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from ..facts.registry import FACTS
from ..model import Fact, Finding, Fix, FleetView, InputSummary, LaunchCommand, Report, SourceRef, TimeWindow
from ..vocabulary import KV_SATURATED, RELEASE_BAND_FIRST

# The GPU memory picture, in the order the issue draws it. (fact, label)
MEMORY_PARTS: tuple[tuple[str, str], ...] = (
    ("weights_gib", "Weights"),
    ("activation_gib", "Activation peak"),
    ("non_torch_gib", "Non-torch (CUDA context, NCCL)"),
    ("cuda_graph_gib", "CUDA graphs"),
    ("kv_cache_gib", "KV cache"),
)
MEMORY_FACTS: tuple[str, ...] = ("gpu_total_gib", "gpu_memory_utilization", "budget_gib",
                                 *(name for name, _ in MEMORY_PARTS), "kv_cache_tokens",
                                 "other_processes_gib", "this_process_gib", "free_gib", "tried_to_allocate_gib")
# Long texts that are evidence themselves; tables show them as lines, not as values.
LONG_FACTS: frozenset[str] = frozenset({"failure_message"})
UNKNOWN = "unknown"


MAX_PROSE = 600   # a rule's sentence can quote a log line; a 200 KB line must not become a 200 KB sentence

# Characters input may carry that a reader must not get raw: C0 controls but tab and newline (an ESC
# drives a terminal), DEL and C1 controls, and the bidirectional overrides and isolates (U+202A-202E,
# U+2066-2069, U+200E/200F, U+061C) that make text read in another order than it is written
# ("Trojan Source"), and the line and paragraph separators.
UNSAFE_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_UNSAFE = re.compile(f"[{UNSAFE_CHARS}]")
_UNSAFE_OR_NEWLINE = re.compile(f"[{UNSAFE_CHARS}\n]")


def _visible(m: re.Match[str]) -> str:
    code = ord(m[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_UNSAFE_BUT_COLOUR = re.compile(f"(\x1b\\[[0-9;]*m)|[{UNSAFE_CHARS}]")


def terminal_safe(text: str) -> str:
    """Text for a terminal: like `neutral`, but colour codes (ESC [ ... m) stay, as the renderer's own.
    Log text reaches here with its colour already stripped (envelope), so only ours are left."""
    return _UNSAFE_BUT_COLOUR.sub(lambda m: m[1] or _visible(m), text)


def neutral(text: str, newlines: bool = True) -> str:
    """Input text as a report may print it: unsafe characters (see UNSAFE_CHARS) shown as escapes
    (`\\x1b`, `\\u202e`); with `newlines=False` a newline too, for text that must stay one line."""
    return (_UNSAFE if newlines else _UNSAFE_OR_NEWLINE).sub(_visible, text)


def clip(text: str, limit: int = MAX_PROSE) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def verdict_title(report: Report) -> str:
    """The verdict's short title, from its class in rules/classes/ (the report carries it)."""
    return report.heading or report.diagnosis.verdict.replace("_", " ")


def lead_finding(report: Report) -> Finding | None:
    findings = report.diagnosis.findings
    return findings[0] if findings else None


def format_number(value: Any, unit: str | None = None) -> str:
    """One figure as a person reads it: GiB to two decimals, counts with thousands separators."""
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if unit == "GiB":
            return f"{value:,.2f}"
        if unit == "ratio":
            return f"{value:.3g}"
        if unit == "seconds":     # 0.17 s, 12.4 s, 1,234 s: a latency, not a float's every digit
            return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}" if abs(value) < 100 else f"{value:,.0f}"
        # counts (tokens, requests, preemptions, per minute): whole above 100, three figures below
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


_SINGULAR = {"WARNING/ERROR lines": "WARNING/ERROR line",
             "tokens": "token", "processes": "process", "lines": "line", "requests": "request", "GPUs": "GPU",
             "preemptions": "preemption", "intervals": "interval", "blocks": "block", "minutes": "minute",
             "snapshots": "snapshot", "attempts": "attempt", "groups": "group",
             "instances": "instance", "scrapes": "scrape"}
_SHORT_UNITS = {"seconds": "s"}


def plural(count: int, noun: str) -> str:
    """ "1 line", "2 lines", "1,024 lines": the noun agrees with its count."""
    return f"{count:,} {_SINGULAR.get(noun, noun) if count == 1 else noun}"


def format_value(value: Any, unit: str | None = None) -> str:
    """A figure with its unit ("57.00 GiB", "415,072 tokens", "0.17 s", "12.67x"); absent is "unknown", never 0."""
    text = format_number(value, unit)
    if value is None or isinstance(value, (bool, str)) or not unit or unit == "ratio":
        return text
    if unit == "x":
        return f"{text}x"
    if unit in _SHORT_UNITS:
        return f"{text} {_SHORT_UNITS[unit]}"
    if text == "1":
        unit = _SINGULAR.get(unit, unit)
    return f"{text} {unit}"


FRACTION_FACTS = frozenset({"gpu_memory_utilization"})     # a vLLM flag's value: shown as the flag takes it


def format_fact(fact: Fact | None) -> str:
    """A fact as a person reads it: a ratio as a percentage (as the summaries say it), except a flag's value."""
    if fact is None:
        return UNKNOWN
    if fact.unit == "ratio" and isinstance(fact.value, float) and fact.name not in FRACTION_FACTS:
        return f"{fact.value:.1%}".replace(".0%", "%").replace("%", " %")
    return format_value(fact.value, fact.unit)


def ordered_facts(facts: Mapping[str, Fact]) -> list[Fact]:
    """Facts in the registry's order (settings, memory, failure, serving), which reads better than A-Z."""
    order = {name: i for i, name in enumerate(FACTS)}
    return [facts[name] for name in sorted(facts, key=lambda n: (order.get(n, len(order)), n))]


def key_fact_names(report: Report) -> list[str]:
    """The facts behind the verdict and the fix, then the memory figures: the compact table."""
    d = report.diagnosis
    lead = lead_finding(report)
    names: list[str] = []
    for name in (*(lead.facts if lead else ()), *(n for f in d.fixes for n in f.computed_from), *MEMORY_FACTS):
        if name in d.facts and name not in names and name not in LONG_FACTS:
            names.append(name)
    return names


def fix_is_unchecked(fix: Fix) -> bool:
    """A number the capacity model could not check (the text renderer marks it the same way)."""
    return fix.status == "unchecked"


def unchecked_note(fix: Fix) -> str:
    """Why a fix is unchecked, and what would check it: "unchecked: give --gpu NAME or --gpu-memory-gib"."""
    return "unchecked" + (": give " + "; ".join(fix.needs) if fix.needs else "")


def listed_fixes(fixes: Iterable[Fix]) -> tuple[list[tuple[int, Fix]], list[Fix]]:
    """The fixes to number (checked, unchecked, advice), each with its number (the command names it), and the
    levers the model predicts are not enough alone: listed after them, never numbered as a fix."""
    fixes = list(fixes)
    numbered = [f for f in fixes if f.status != "not_enough"]
    return list(enumerate(numbered, 1)), [f for f in fixes if f.status == "not_enough"]


def command_heading(launch: LaunchCommand) -> str:
    """What the command is: the incident's whole launch with fix N, or only what to add to it; and which
    release's arguments every flag was checked against."""
    checked = ("every flag checked against the arguments of "
               f"{launch.release_basis or 'vLLM ' + str(launch.vllm_version)}")
    if launch.complete:
        return f"Fix {launch.fix_index} applied to the incident's own launch ({checked}):"
    return (f"Add to your command (fix {launch.fix_index}; the log does not show the whole launch command; "
            f"{checked}):")


def no_command_sentence(fixes: Iterable[Fix]) -> str | None:
    """When there are flag fixes but none is checked, say so rather than print one to paste."""
    flagged = [f for f in fixes if f.flag and f.value is not None]
    if not flagged or any(f.status == "checked" for f in flagged):
        return None
    needs = list(dict.fromkeys(n for f in flagged for n in f.needs))
    return "No command to paste: no flag fix above is checked" + (" (give " + "; ".join(needs) + ")" if needs else "")


def release_sentence(report: Report) -> str | None:
    """Which release the fixes were checked against when the log names no version and no command says it."""
    band = report.diagnosis.facts.get("release_band")
    if band is None or report.launch is not None or not any(f.flag for f in report.diagnosis.fixes):
        return None
    return (f"Fixes checked against vLLM {RELEASE_BAND_FIRST[band.value]}, the oldest release the log's formats "
            f"allow ({band.note}).")


def references(fixes: Iterable[Fix]) -> list[str]:
    return sorted({f.reference for f in fixes if f.reference})


def split_match(ref: SourceRef) -> tuple[str, str, str]:
    """The line cut around its matched part, for highlighting: (before, match, after)."""
    if not ref.span:
        return ref.text, "", ""
    start, end = max(0, ref.span[0]), min(len(ref.text), ref.span[1])
    if start >= end:
        return ref.text, "", ""
    return ref.text[:start], ref.text[start:end], ref.text[end:]


def input_coverage(i: InputSummary) -> str:
    return (f"{i.path}: {plural(i.lines_read, 'lines')} read, {i.lines_recognised:,} recognised, "
            f"{i.vllm_lines:,} from vLLM")


def unrecognised_sentence(report: Report) -> str | None:
    if not report.unrecognised:
        return None
    total = sum(g.count for g in report.unrecognised)
    return (f"{plural(total, 'WARNING/ERROR lines')} in {plural(len(report.unrecognised), 'groups')} "
            f"{'was' if total == 1 else 'were'} not recognised")


def coverage_sentence(report: Report) -> str:
    parts = [input_coverage(i) for i in report.inputs]
    text = "; ".join(parts) + "." if parts else "No input was read."
    unrecognised = unrecognised_sentence(report)
    if unrecognised:
        text += f" {unrecognised}."
    return text


def attempts_sentence(report: Report) -> str | None:
    """Every startup in the input and how each ended, runs of the same verdict together ("1-2 ended as
    external_pressure, 3 ended as kv_cache_too_small"), so no earlier startup's verdict goes unnamed."""
    attempts = report.attempts
    if len(attempts) < 2:
        return None
    runs: list[tuple[int, int, str]] = []           # (first startup, last startup, verdict), numbered from 1
    for number, attempt in enumerate(attempts, 1):
        if runs and runs[-1][2] == attempt.verdict:
            runs[-1] = (runs[-1][0], number, attempt.verdict)
        else:
            runs.append((number, number, attempt.verdict))
    if len(runs) == 1:
        return f"all {len(attempts)} startups in this input ended as {runs[0][2]}; this report is about the last."
    parts = [f"{first}{'' if first == last else f'-{last}'} ended as {verdict}" for first, last, verdict in runs]
    return f"{len(attempts)} startups in this input: {', '.join(parts)}; this report is about the last."


def redactions_sentence(report: Report) -> str | None:
    if not report.redactions:
        return None
    hidden = ", ".join(f"{n} {kind}" for kind, n in sorted(report.redactions.items()))
    return f"Secrets hidden: {hidden} (vtriage --no-redact shows them)."


def instance_figures(figures: Mapping[str, Any], sep: str = "  ") -> str:
    """The key figures of one instance, in the words an operator uses."""
    f = figures
    parts = []
    if "kv_cache_usage_max" in f:
        full = f" (>= {100 * KV_SATURATED:.0f} % for {f['saturated_share']:.0%})" if f.get("saturated_share") else ""
        parts.append(f"KV max {f['kv_cache_usage_max']:.0%}{full}")
    if "preemptions" in f:
        rate = f" ({f['preemption_rate_per_min']:.1f}/min)" if "preemption_rate_per_min" in f else ""
        parts.append(f"preemptions {f['preemptions']}{rate}")
    elif "preemptions_since_start" in f:
        rates = ([f"{f['preemption_rate_per_min']:.2g}/min on average"] if "preemption_rate_per_min" in f else []) + \
            ([f"{f['preemptions_per_request_mean']:.2g} per request"] if "preemptions_per_request_mean" in f else [])
        parts.append(f"preemptions {f['preemptions_since_start']} since start"
                     + (f" ({', '.join(rates)})" if rates else ""))
    if "requests_preempted_share" in f:
        parts.append(f"{f['requests_preempted_share']:.0%} of requests preempted")
    if "waiting_max" in f:
        growth = f" ({f['waiting_growth']:+d})" if "waiting_growth" in f else ""
        parts.append(f"waiting max {f['waiting_max']}{growth}")
    if "ttft_p95_seconds" in f:
        parts.append(f"TTFT p95 {f['ttft_p95_seconds']:.2f} s")
    if "gpu_memory_used_gib" in f:
        beyond = f.get("gpu_memory_beyond_budget_gib")
        extra = f", {beyond:+.2f} GiB vs reservation" if beyond is not None else ""
        parts.append(f"GPU {f['gpu_memory_used_gib']:.1f} GiB used{extra}")
    return sep.join(parts) or "no key figures in the metrics"


def fleet_heading(fleet: FleetView) -> str:
    """Where the fleet's figures came from: "3 instances from http://prom:9090 {pod=~...}, A to B (step 15 s)"."""
    o = fleet.origin
    where = o.name + (f" {o.selector}" if o.selector else "")
    window = f", {o.start} to {o.end}" if o.start and o.end and o.start != o.end else (f", at {o.end}" if o.end else "")
    step = f" (step {o.step_seconds:g} s)" if o.step_seconds else ""
    return f"{plural(len(fleet.instances), 'instances')} from {where}{window}{step}"


def fleet_tally(fleet: FleetView) -> str:
    """How many instances got each verdict, most common first."""
    counts: dict[str, int] = {}
    for inst in fleet.instances:
        counts[inst.verdict] = counts.get(inst.verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def window_sentence(window: TimeWindow) -> str:
    """What --since/--until kept: the report is about this slice of the input only."""
    w = window
    kept = f"{w.events_kept:,} of {w.events_total:,} recognised log records"
    if w.samples_total:
        kept += f", {w.samples_kept:,} of {w.samples_total:,} timestamped metric samples"
    context = f" (plus {w.context_events} records of the startup before it, for its settings)" \
        if w.context_events else ""
    return f"Window: {w.since or 'the start'} to {w.until or 'the end'}: {kept} inside{context}."


def quiet_suppressions(report: Report) -> list:
    """Suppressions in force that did not fire this time: listed so a stale one is noticed."""
    fired = {item.suppression.rule_id for item in report.diagnosis.suppressed}
    return [x for x in report.suppressions if x.rule_id not in fired]
