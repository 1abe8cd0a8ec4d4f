"""Terminal text: the verdict, why, the lines that prove it, and the fix, readable in ten seconds."""
from __future__ import annotations

import textwrap
from typing import Any

from ..model import FleetView, Report, SourceRef
from . import decision
from .common import (
    command_heading,
    fix_is_unchecked,
    fleet_heading,
    fleet_tally,
    input_coverage,
    instance_figures,
    listed_fixes,
    no_command_sentence,
    plural,
    quiet_suppressions,
    redactions_sentence,
    release_sentence,
    terminal_safe,
    unchecked_note,
    unrecognised_sentence,
    verdict_title,
    window_sentence,
)

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


def _fleet(fleet: FleetView, title: str, s: "_Style") -> list[str]:
    out = [s(f"FLEET  {fleet_heading(fleet)}", "bold")]
    width = max(len(i.name) for i in fleet.instances)
    vwidth = max(len(i.verdict) for i in fleet.instances)
    for inst in fleet.instances:
        colour = _VERDICT_COLOUR.get(inst.verdict, "red")
        out.append(f"  {inst.name.ljust(width)}  {s(inst.verdict.ljust(vwidth), colour)}  "
                   f"{instance_figures(inst.figures)}")
        for reason in inst.stands_out:
            out.append(s(f"  {' ' * width}  ^ stands out: {reason}", "yellow"))
    out.append(f"Overall: {s(title.upper(), 'bold')} ({fleet_tally(fleet)}). "
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
    out: list[str] = _fleet(report.fleet, verdict_title(report), s) if report.fleet else []
    lead = d.findings[0] if d.findings else None
    title = verdict_title(report).upper()
    out.append(s(f"{title}", "bold", _VERDICT_COLOUR.get(d.verdict, "red"))
               + s(f"  ({d.confidence} confidence)", "dim"))
    first = decision.lead(report)
    for label, text in (("Decided by", first.decided_by), ("Restarts", first.restarts), ("Impact", first.impact)):
        if text:
            lines = textwrap.wrap(text, 100 - 12)
            out.append(s(f"{label + ':':<12}", "bold") + lines[0])
            out.extend(" " * 12 + line for line in lines[1:])
    if lead:
        out.extend(textwrap.wrap(lead.summary, 100))
        if lead.why:
            out.extend(s(line, "dim") for line in textwrap.wrap(lead.why, 100))
        if lead.settle:
            out.extend(textwrap.wrap("What would settle it: " + lead.settle, 100))
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
        fixes, short = listed_fixes(d.fixes)
        for i, fix in fixes:
            mark = s(f" ({unchecked_note(fix)})", "dim") if fix_is_unchecked(fix) else ""
            out.append(f"  {i}. {s(fix.action, 'bold')}{mark}")
            out.extend("     " + w for w in textwrap.wrap(fix.why, 96))
            if fix.predicted:
                out.extend("     " + w for w in textwrap.wrap("predicted: " + fix.predicted["summary"], 96))
        if short:
            out.append(s("  Not enough alone (the capacity model predicts each fails or falls short on its own):",
                         "dim"))
            for fix in short:
                said = fix.predicted["summary"] if fix.predicted else fix.why
                out.extend(textwrap.wrap(f"- {fix.action}: {said}", 96, initial_indent="  ",
                                         subsequent_indent="    "))
        launch = report.launch
        if launch is not None:
            out.append("")
            out.extend("  " + w for w in textwrap.wrap(command_heading(launch), 98))
            out.append("  " + s(launch.text, "green"))
            for item in launch.not_recovered:
                out.extend(s(w, "dim") for w in textwrap.wrap(f"not recovered: {item}", 96, initial_indent="  ",
                                                              subsequent_indent="    "))
        elif (sentence := no_command_sentence(d.fixes)) is not None:
            out.append("")
            out.extend("  " + w for w in textwrap.wrap(sentence, 98))
        if (sentence := release_sentence(report)) is not None:
            out.extend(s(w, "dim") for w in textwrap.wrap(sentence, 96, initial_indent="  ",
                                                          subsequent_indent="  "))
        refs = sorted({f.reference for f in d.fixes if f.reference})
        for doc in refs:
            out.append(s(f"  docs: {doc}", "dim"))
    others = d.findings[1:]
    if others:
        out.append("")
        out.append(s("Also seen", "bold"))
        for f in others:
            out.append(f"  - {f.title}: {f.summary}")
    out.extend(_suppressed(report, s))
    width = max((len(r.verdict) for r in (*d.ruled_out, *d.not_assessed)), default=0)
    for heading, items in (("Ruled out", d.ruled_out), ("Not assessed", d.not_assessed)):
        if items:
            out.append("")
            out.append(s(heading, "bold") + (s("  (no fact in the input rules these in or out)", "dim")
                                             if items is d.not_assessed else ""))
            out.extend(f"  {r.verdict.ljust(width)}  {r.reason}" for r in items)
    out.append("")
    if report.runbook:
        out.append(f"Runbook: {report.runbook}  (vtriage explain {d.verdict})")
    if report.window:
        out.append(window_sentence(report.window))
        out.append(s(f"Times: {report.window.basis}.", "dim"))
    if report.fleet is None and any(i.kind == "metrics" for i in report.inputs):
        window = d.facts.get("metrics_window_seconds")
        scrapes = d.facts.get("metrics_snapshots")
        span = f" over {window.value:.0f} s" if window else ""
        count = f"{plural(scrapes.value, 'scrapes')}{span}: " if scrapes else ""
        out.append(s(f"Metrics, {count}{instance_figures(report.metrics_figures)}.", "dim"))
    for inp in report.inputs:
        out.append(s(input_coverage(inp) + ".", "dim"))
    out.append(s(f"Config: {report.config or 'none'}.", "dim"))
    unrecognised = unrecognised_sentence(report)
    if unrecognised:
        out.append(s(f"{unrecognised}; the largest:", "dim"))
        for g in report.unrecognised[:3]:
            out.append(s(f"  {g.count:>5} x {g.level} {g.template[:100]}  ({g.example.where()})", "dim"))
    hidden = redactions_sentence(report)
    if hidden:
        out.append(s(hidden, "dim"))
    for w in report.warnings:
        out.append(s(f"warning: {w}", "yellow"))
    return terminal_safe("\n".join(out) + "\n")     # an ESC or a bidi override in the input cannot drive the terminal
