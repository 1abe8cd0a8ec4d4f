"""Markdown for pasting into a GitHub issue, Slack or Jira: verdict heading, the fix, the evidence folded.

Log text only ever lands in code spans or fenced blocks (where GitHub renders no HTML), and every other
string is escaped, so a prompt with `<script>` or `![](http://...)` in it stays text.
"""
from __future__ import annotations

import html
import re
from typing import Any

from ..model import Report, SourceRef
from . import decision
from .common import (
    MEMORY_PARTS,
    clip,
    command_heading,
    coverage_sentence,
    fix_is_unchecked,
    fleet_heading,
    fleet_tally,
    format_fact,
    instance_figures,
    key_fact_names,
    lead_finding,
    listed_fixes,
    neutral,
    no_command_sentence,
    quiet_suppressions,
    redactions_sentence,
    references,
    release_sentence,
    unchecked_note,
    verdict_title,
    window_sentence,
)

MAX_EVIDENCE_LINES = 12
MAX_UNRECOGNISED = 5
MAX_LINE = 400
_PROSE_SPECIAL = re.compile(r"([\\\[\]*!])")


def prose(text: str) -> str:
    """Text outside code: HTML can't open, links and images can't form, control and bidi characters show
    as escapes. Backticks stay (our texts use them)."""
    return _PROSE_SPECIAL.sub(r"\\\1", html.escape(clip(neutral(" ".join(str(text).split()))), quote=False))


def code_span(text: str) -> str:
    """An inline code span that holds any text, backticks included (CommonMark: a longer fence)."""
    text = neutral(" ".join(str(text).split()))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(text: str) -> str:
    """A table cell: pipes split cells even inside code spans in GFM, so escape them everywhere."""
    return text.replace("|", "\\|")


def code_block(lines: list[str], lang: str = "") -> list[str]:
    """A fenced block: each line stays one line (a newline in a file name cannot close the fence), and
    the fence is longer than any run of backticks inside."""
    lines = [neutral(line, newlines=False) for line in lines]
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", *lines, fence]


def _clip(text: str) -> str:
    return text if len(text) <= MAX_LINE else text[:MAX_LINE - 1] + "…"


def _evidence_lines(refs: tuple[SourceRef, ...]) -> list[str]:
    shown = [f"{ref.where()}  {_clip(ref.text.strip())}" for ref in refs[:MAX_EVIDENCE_LINES]]
    if len(refs) > MAX_EVIDENCE_LINES:
        shown.append(f"… {len(refs) - MAX_EVIDENCE_LINES} more lines in --format json")
    return code_block(shown, "text")


def _fleet(report: Report) -> list[str]:
    fleet = report.fleet
    if not fleet:
        return []
    out = [f"#### Fleet: {prose(fleet_heading(fleet))}", "", "| instance | verdict | key figures |", "|---|---|---|"]
    for inst in fleet.instances:
        stands = "".join(f"<br>stands out: {prose(r)}" for r in inst.stands_out)
        out.append(f"| {cell(code_span(inst.name))} | {cell(prose(inst.verdict))} | "
                   f"{cell(prose(instance_figures(inst.figures, ' · ')))}{cell(stands)} |")
    return out + ["", f"Overall: **{prose(fleet.verdict)}** ({prose(fleet_tally(fleet))}); the report below is "
                      f"{code_span(fleet.detail)}.", ""]


def _suppressed(report: Report) -> list[str]:
    if not report.suppressions:
        return []
    out = ["#### Suppressed", "", "_Accepted findings: listed, but they do not decide the verdict._", ""]
    for item in report.diagnosis.suppressed:
        f, why = item.finding, item.suppression
        until = f", until {why.expires}" if why.expires else ""
        out.append(f"- **SUPPRESSED** {code_span(f.rule_id)} → {prose(str(f.verdict))}: {prose(f.summary)} "
                   f"_(accepted: {prose(why.reason)}; {code_span(why.origin + until)})_")
    quiet = quiet_suppressions(report)
    if quiet:
        out.append("- Did not fire: " + ", ".join(f"{code_span(x.rule_id)} ({code_span(x.origin)})" for x in quiet))
    return out + [""]


def _runbook(report: Report) -> str | None:
    if not report.runbook:
        return None
    link = f"<{report.runbook}>" if report.runbook.startswith(("https://", "http://")) else code_span(report.runbook)
    return f"Runbook: {link} (`vtriage explain {report.diagnosis.verdict}`)"


def render_markdown(report: Report, **_: Any) -> str:
    d = report.diagnosis
    lead = lead_finding(report)
    severity = f", severity {report.severity}" if report.severity else ""
    out: list[str] = [f"### vtriage: {prose(verdict_title(report))} ({d.confidence} confidence{severity})", ""]
    out += _fleet(report)
    first = decision.lead(report)
    leading = [(label, text) for label, text in (("Decided by", first.decided_by), ("Restarts", first.restarts),
                                                 ("Impact", first.impact)) if text]
    if leading:
        out += [f"- **{label}:** {prose(text)}" for label, text in leading] + [""]
    if lead:
        out += [f"**{prose(lead.summary)}**", ""]
        if lead.why:
            out += [prose(lead.why), ""]
        if lead.settle:
            out += [f"What would settle it: {prose(lead.settle)}", ""]
    elif d.suppressed:
        out += ["**Every rule that fired is suppressed (below), and no other rule decides.**", ""]
    if report.window:
        out += [f"_{prose(window_sentence(report.window))} Times: {prose(report.window.basis)}._", ""]

    if d.fixes:
        out += ["#### Fix", ""]
        if report.launch is not None:
            out += [prose(command_heading(report.launch)), ""] + code_block([report.launch.text], "sh") + [""]
            out += [f"_Not recovered: {prose(item)}_" for item in report.launch.not_recovered]
            out += [""] if report.launch.not_recovered else []
        elif (sentence := no_command_sentence(d.fixes)) is not None:
            out += [f"_{prose(sentence)}_", ""]
        if (sentence := release_sentence(report)) is not None:
            out += [f"_{prose(sentence)}_", ""]
        fixes, short = listed_fixes(d.fixes)
        for i, fix in fixes:
            action = code_span(fix.action) if fix.flag and fix.action.startswith("--") else f"**{prose(fix.action)}**"
            mark = f" _({prose(unchecked_note(fix))})_" if fix_is_unchecked(fix) else ""
            out.append(f"{i}. {action}{mark}: {prose(fix.why)}")
            if fix.predicted:     # a nested item: a plain continuation line would join the paragraph above
                out.append(f"   - predicted: {prose(fix.predicted['summary'])}")
        if short:
            out += ["", "**Not enough alone** (the capacity model predicts each fails or falls short on its own):", ""]
            for fix in short:
                action = code_span(fix.action) if fix.flag and fix.action.startswith("--") else prose(fix.action)
                said = fix.predicted["summary"] if fix.predicted else fix.why
                out.append(f"- {action}: {prose(said)}")
        refs = references(d.fixes)
        if refs:
            out += ["", "Docs: " + ", ".join(f"<{r}>" if r.startswith("https://") else prose(r) for r in refs)]
        out.append("")

    if lead and lead.evidence or d.findings[1:]:
        total = sum(len(f.evidence) for f in d.findings)
        out += [f"<details><summary>Evidence ({total} line{'s' if total != 1 else ''})</summary>", ""]
        for finding in d.findings:
            out.append(f"**{prose(finding.title)}**" + ("" if finding is lead else f": {prose(finding.summary)}"))
            out.append("")
            if finding.evidence:
                out += _evidence_lines(finding.evidence) + [""]
        out += ["</details>", ""]

    names = key_fact_names(report)
    if names:
        out += ["#### Facts", "", "| fact | value | where |", "|---|---|---|"]
        for name in names:
            fact = d.facts[name]
            where = code_span(fact.evidence[0].where()) if fact.evidence else (prose(fact.note) if fact.note else "")
            out.append(f"| {cell(code_span(name))} | {cell(prose(format_fact(fact)))} | {cell(where)} |")
        unknown = [name for name in ("gpu_total_gib", "budget_gib", *(n for n, _ in MEMORY_PARTS))
                   if name not in d.facts]
        out.append("")
        if unknown:
            out += ["Unknown (not in the input, not zero): " + ", ".join(code_span(n) for n in unknown) + ".", ""]
        out += [f"All {len(d.facts)} facts: `vtriage --format json`.", ""]

    out += _suppressed(report)

    if d.ruled_out:
        out += ["#### Ruled out", ""]
        for r in d.ruled_out:
            where = f" ({', '.join(code_span(e.where()) for e in r.evidence[:2])})" if r.evidence else ""
            out.append(f"- **{prose(r.verdict)}**: {prose(r.reason)}{where}")
        out.append("")
    if d.not_assessed:
        out += ["#### Not assessed", "", "_No fact in the input rules these in or out._", ""]
        out += [f"- **{prose(r.verdict)}**: {prose(r.reason)}" for r in d.not_assessed]
        out.append("")

    runbook = _runbook(report)
    if runbook:
        out += [runbook, ""]
    out.append(f"Config: {code_span(report.config) if report.config else 'none'}")
    out.append("")
    out.append(f"Coverage: {prose(coverage_sentence(report))}")
    for group in report.unrecognised[:MAX_UNRECOGNISED]:
        out.append(f"- {group.count:,} × {prose(group.level)} {code_span(_clip(group.template))} "
                   f"(e.g. {code_span(group.example.where())})")
    for line in (redactions_sentence(report), *(f"Warning: {w}" for w in report.warnings)):
        if line:
            out += ["", prose(line)]
    out += ["", f"<sub>vtriage {prose(report.tool_version)} · rule path: "
                f"{prose(' → '.join(d.rule_path))}</sub>"]
    return "\n".join(out) + "\n"
