"""The HTML report: one self-contained page for the incident ticket.

Inline CSS, inline SVG, one tiny inline script (the copy button; the page works without it), no
request of any kind when opened: a Content-Security-Policy that allows nothing external says so to the
browser as well. Jinja autoescapes every value, so log text (prompts included) can only ever be text.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jinja2
from markupsafe import Markup, escape

from ..model import Fact, Report, SourceRef
from . import charts, decision
from .common import (
    attempts_sentence,
    clip,
    command_heading,
    coverage_sentence,
    fix_is_unchecked,
    fleet_heading,
    fleet_tally,
    format_fact,
    format_value,
    instance_figures,
    lead_finding,
    listed_fixes,
    neutral,
    no_command_sentence,
    ordered_facts,
    quiet_suppressions,
    redactions_sentence,
    references,
    release_sentence,
    split_match,
    unchecked_note,
    verdict_title,
    window_sentence,
)

MAX_EVIDENCE_LINES = 12      # per finding; a 1 GB log must still make a small page
MAX_UNRECOGNISED = 20
MAX_ATTEMPTS = 50
LINE_PREVIEW = 320           # characters of a long line shown before it is folded
LINE_MAX = 2000              # characters of a line the page holds at all


@dataclass(frozen=True)
class LogLine:
    """One evidence line cut for display: the preview around the match, and the whole line if longer."""

    ref: SourceRef
    before: str
    match: str
    after: str
    folded: tuple[str, str, str] | None    # the whole line (up to LINE_MAX), when the preview is cut
    hidden_chars: int                      # characters beyond LINE_MAX, not in the page


def log_line(ref: SourceRef) -> LogLine:
    text = ref.text.rstrip()
    before, match, after = split_match(SourceRef(ref.path, ref.line, text, ref.span))
    if len(text) <= LINE_PREVIEW:
        return LogLine(ref, before, match, after, None, 0)
    keep_before = min(len(before), 100 if match else LINE_PREVIEW)
    room = max(0, LINE_PREVIEW - keep_before - len(match))
    preview = (("…" if keep_before < len(before) else "") + before[len(before) - keep_before:],
               match[:LINE_PREVIEW], after[:room] + ("…" if room < len(after) or len(match) > LINE_PREVIEW else ""))
    whole = text[:LINE_MAX]
    folded = split_match(SourceRef(ref.path, ref.line, whole, ref.span))
    return LogLine(ref, *preview, folded, max(0, len(text) - LINE_MAX))


def inline_code(text: str) -> Markup:
    """Prose from the rules uses `backticks` for commands; show them as code, escaping everything."""
    pieces = neutral(clip(text)).split("`")
    if len(pieces) % 2 == 0:     # unbalanced: leave it as plain text
        return escape(neutral(text))
    return Markup("").join(escape(p) if i % 2 == 0 else Markup("<code>") + escape(p) + Markup("</code>")
                           for i, p in enumerate(pieces))


def _printable(value: Any) -> Any:
    """Every value the page prints: input text with its control and bidi characters shown as escapes
    (markup this module built, already escaped, is left as it is)."""
    return neutral(value) if isinstance(value, str) and not isinstance(value, Markup) else value


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("triage.render", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, finalize=_printable,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["fact"] = format_fact
    env.filters["value"] = format_value
    env.filters["code"] = inline_code
    env.filters["clip"] = clip
    return env


def _script() -> tuple[Markup, str]:
    source, _, _ = environment().loader.get_source(environment(), "report.js")  # type: ignore[union-attr]  # it has one
    digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii")
    return Markup(source), f"'sha256-{digest}'"


def _estimates(first: decision.Lead) -> dict[str, Fact]:
    """Figures the deciding comparison estimated, for the memory picture to draw as estimates."""
    return {f.fact_estimated: Fact(f.fact_estimated, f.value, f.unit, (), f"estimate: {f.note}")
            for c in first.comparisons for f in c.figures if f.fact_estimated}


def context(report: Report) -> dict[str, Any]:
    d = report.diagnosis
    lead = lead_finding(report)
    first = decision.lead(report)
    script, script_hash = _script()
    attempts = report.attempts[-MAX_ATTEMPTS:]
    return {
        "report": report,
        "d": d,
        "lead": lead,
        "title": verdict_title(report),
        "findings": [(f, [log_line(r) for r in f.evidence[:MAX_EVIDENCE_LINES]],
                      max(0, len(f.evidence) - MAX_EVIDENCE_LINES)) for f in d.findings],
        "fixes": [(i, f, unchecked_note(f) if fix_is_unchecked(f) else None) for i, f in listed_fixes(d.fixes)[0]],
        "short": listed_fixes(d.fixes)[1],
        "command_heading": command_heading(report.launch) if report.launch else None,
        "no_command": no_command_sentence(d.fixes) if report.launch is None else None,
        "release": release_sentence(report),
        "doc_links": references(d.fixes),
        "memory": charts.memory_picture(d.facts, report.ranks, _estimates(first)),
        "timeline": charts.timeline(report.timeline, report.failure_at,
                                    frozenset(i.path for i in report.inputs if i.kind == "metrics"),
                                    report.metrics_timeline),
        "first": first,
        "decision": charts.decision_charts(first.comparisons),
        "failure": log_line(report.failure_at) if report.failure_at else None,
        "facts": ordered_facts(d.facts),
        "log_line": log_line,
        "ruled_out": d.ruled_out,
        "coverage": coverage_sentence(report),
        "unrecognised": report.unrecognised[:MAX_UNRECOGNISED],
        "unrecognised_left": max(0, len(report.unrecognised) - MAX_UNRECOGNISED),
        "attempts": attempts,
        "attempts_left": len(report.attempts) - len(attempts),
        "attempts_sentence": attempts_sentence(report),
        "redactions": redactions_sentence(report),
        "inputs_label": ", ".join(i.path for i in report.inputs) or "no input",
        "fleet": report.fleet,
        "fleet_heading": fleet_heading(report.fleet) if report.fleet else "",
        "fleet_tally": fleet_tally(report.fleet) if report.fleet else "",
        "fleet_rows": [(i, instance_figures(i.figures, " · ")) for i in report.fleet.instances] if report.fleet else [],
        "window": window_sentence(report.window) if report.window else "",
        "runbook": report.runbook,
        "runbook_is_url": bool(report.runbook and report.runbook.startswith(("https://", "http://"))),
        "quiet_suppressions": quiet_suppressions(report),
        "script": script,
        "script_hash": script_hash,
    }


def render_html(report: Report, **_: Any) -> str:
    return environment().get_template("report.html.j2").render(context(report))
