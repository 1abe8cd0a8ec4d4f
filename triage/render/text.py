"""Terminal text: the verdict, why, the lines that prove it, and the fix, readable in ten seconds."""
from __future__ import annotations

import textwrap
from typing import Any

from ..fleet import KEY_FIGURES
from ..model import FleetView, Report, SourceRef
from .common import fleet_heading, fleet_tally, instance_figures, quiet_suppressions, terminal_safe, window_sentence

_COLOURS = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
_VERDICT_COLOUR = {"healthy": "green", "inconclusive": "yellow", "other_failure": "yellow"}
MAX_EVIDENCE_LINES = 6
MAX_TEXT = 160


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, *names: str) -> str:
        if not self.color or not names:
            return text
        codes = ";".join(_COLOURS[n] for n in names)
        return f"\x1b[{codes}m{text}\x1b[0m"


def _line(ref: SourceRef, style: _Style) -> str:
    text = ref.text.strip()
    if ref.span and style.color:
        start, end = ref.span
        start, end = max(0, start), min(len(ref.text), end)
        raw = ref.text
        text = (raw[:start] + style(raw[start:end], "bold") + raw[end:]).strip()
        visible = len(raw.strip())
    else:
        visible = len(text)
    if visible > MAX_TEXT and not style.color:
        text = text[:MAX_TEXT - 1] + "…"
    return f"  {style(ref.where(), 'cyan')}  {text}"


def _fleet(fleet: FleetView, s: "_Style") -> list[str]:
    out = [s(f"FLEET  {fleet_heading(fleet)}", "bold")]
    width = max(len(i.name) for i in fleet.instances)
    vwidth = max(len(i.verdict) for i in fleet.instances)
    for inst in fleet.instances:
        colour = _VERDICT_COLOUR.get(inst.verdict, "red")
        out.append(f"  {inst.name.ljust(width)}  {s(inst.verdict.ljust(vwidth), colour)}  {instance_figures(inst.figures)}")
        for reason in inst.stands_out:
            out.append(s(f"  {' ' * width}  ^ stands out: {reason}", "yellow"))
    out.append(f"Overall: {s(fleet.verdict.upper().replace('_', ' '), 'bold')} ({fleet_tally(fleet)}). "
               f"In detail: {fleet.detail}")
    out.append("")
    return out


def _suppressed(report: Report, s: _Style) -> list[str]:
    """Accepted findings are shown, never hidden: each fired one, then those that did not fire."""
    if not report.suppressions:
        return []
    out = ["", s("Suppressed", "bold") + s("  (accepted findings: listed, but they do not decide the verdict)", "dim")]
    for item in report.diagnosis.suppressed:
        f, why = item.finding, item.suppression
        out.append(f"  {s('SUPPRESSED', 'yellow')}  {f.rule_id} -> {f.verdict}")
        out.extend("              " + w for w in textwrap.wrap(f.summary, 86))
        until = f", until {why.expires}" if why.expires else ""
        out.append(s(f"              accepted: {why.reason}  ({why.origin}{until})", "dim"))
    quiet = quiet_suppressions(report)
    if quiet:
        out.append(s("  did not fire: " + ", ".join(f"{x.rule_id} ({x.origin})" for x in quiet), "dim"))
    return out


def render_text(report: Report, color: bool = False, **_: Any) -> str:
    s = _Style(color)
    d = report.diagnosis
    out: list[str] = _fleet(report.fleet, s) if report.fleet else []
    lead = d.findings[0] if d.findings else None
    title = d.verdict.upper().replace("_", " ")
    out.append(s(f"{title}", "bold", _VERDICT_COLOUR.get(d.verdict, "red")) + s(f"  ({d.confidence} confidence)", "dim"))
    if lead:
        out.extend(textwrap.wrap(lead.summary, 100))
        if lead.why:
            out.extend(s(line, "dim") for line in textwrap.wrap(lead.why, 100))
    elif d.suppressed:
        out.append("Every rule that fired is suppressed (below), and no other rule decides.")
    if lead and lead.evidence:
        out.append("")
        out.append(s("Evidence", "bold"))
        for ref in lead.evidence[:MAX_EVIDENCE_LINES]:
            out.append(_line(ref, s))
        if len(lead.evidence) > MAX_EVIDENCE_LINES:
            out.append(s(f"  … {len(lead.evidence) - MAX_EVIDENCE_LINES} more in --format json", "dim"))
    if d.fixes:
        out.append("")
        out.append(s("Fix", "bold"))
        for i, fix in enumerate(d.fixes, 1):
            mark = "" if fix.checked or fix.value is None else s(" (unchecked)", "dim")
            out.append(f"  {i}. {s(fix.action, 'bold')}{mark}")
            out.extend("     " + w for w in textwrap.wrap(fix.why, 96))
            if fix.predicted:
                out.extend("     " + w for w in textwrap.wrap("predicted: " + fix.predicted["summary"], 96))
        if report.command:
            out.append("")
            out.append("  " + s(report.command, "green"))
        refs = sorted({f.reference for f in d.fixes if f.reference})
        for ref in refs:
            out.append(s(f"  docs: {ref}", "dim"))
    others = d.findings[1:]
    if others:
        out.append("")
        out.append(s("Also seen", "bold"))
        for f in others:
            out.append(f"  - {f.title}: {f.summary}")
    out.extend(_suppressed(report, s))
    if d.ruled_out:
        out.append("")
        out.append(s("Ruled out", "bold"))
        width = max(len(r.verdict) for r in d.ruled_out)
        for r in d.ruled_out:
            out.append(f"  {r.verdict.ljust(width)}  {r.reason}")
    out.append("")
    if report.runbook:
        out.append(f"Runbook: {report.runbook}  (vtriage explain {d.verdict})")
    if report.window:
        out.append(window_sentence(report.window))
        out.append(s(f"Times: {report.window.basis}.", "dim"))
    if len(report.attempts) > 1:
        out.append(f"Attempts: {len(report.attempts)} startups in this log; this is the last. "
                   f"{report.same_failure_attempts} of {len(report.attempts)} ended as {d.verdict}.")
    if report.fleet is None and any(i.kind == "metrics" for i in report.inputs):
        figures = {n: d.facts[n].value for n in KEY_FIGURES if n in d.facts}
        window = d.facts.get("metrics_window_seconds")
        scrapes = d.facts.get("metrics_snapshots")
        span = f" over {window.value:.0f} s" if window else ""
        count = f"{scrapes.value} scrape(s){span}: " if scrapes else ""
        out.append(s(f"Metrics, {count}{instance_figures(figures)}.", "dim"))
    for inp in report.inputs:
        out.append(s(f"Read {inp.path}: {inp.lines_read:,} lines, {inp.lines_recognised:,} recognised, "
                     f"{inp.vllm_lines:,} from vLLM.", "dim"))
    if report.unrecognised:
        total = sum(g.count for g in report.unrecognised)
        out.append(s(f"{total:,} WARNING/ERROR line(s) in {len(report.unrecognised)} group(s) were not recognised; "
                     "the largest:", "dim"))
        for g in report.unrecognised[:3]:
            out.append(s(f"  {g.count:>5} x {g.level} {g.template[:100]}  ({g.example.where()})", "dim"))
    if report.redactions:
        hidden = ", ".join(f"{n} {k}" for k, n in sorted(report.redactions.items()))
        out.append(s(f"Redacted: {hidden} (--no-redact shows them).", "dim"))
    for w in report.warnings:
        out.append(s(f"warning: {w}", "yellow"))
    return terminal_safe("\n".join(out) + "\n")     # an ESC or a bidi override in the input cannot drive the terminal
