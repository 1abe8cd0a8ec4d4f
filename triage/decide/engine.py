"""Walk the decision tree over a set of facts and return the diagnosis. Pure: facts in, verdict out (the fixes
the chosen rule names are sized after, by the pipeline's `prescribe`: the capacity model is not a rule).

Conditions use three-valued logic: a predicate on a fact that is absent is *unknown*, and a node
whose condition is unknown does not fire. The verdict is the first leaf reached depth-first in
`order`; every other class gets the fact that rules it out, or is "not assessed" when no fact does.
A suppressed leaf (.vtriage.toml, --ignore) is evaluated and reported, but never chosen: the walk
moves on to the next leaf.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..facts.registry import FACTS
from ..model import Diagnosis, Fact, Finding, RuledOut, SourceRef, SuppressedFinding, Suppression
from ..vocabulary import THRESHOLDS, UNDECIDED, VALUE_WORDS, problems_first
from .ruleset import Condition, Node, RuleSet


def evaluate(cond: Condition, facts: Mapping[str, Fact]) -> bool | None:
    """True, False, or None when it depends on a fact the input did not give."""
    if cond.combinator == "all":
        results = [evaluate(c, facts) for c in cond.children]
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if cond.combinator == "any":
        results = [evaluate(c, facts) for c in cond.children]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    if cond.combinator == "not":
        inner = evaluate(cond.children[0], facts)
        return None if inner is None else not inner
    fact = facts.get(cond.fact or "")
    if cond.op == "present":
        return fact is not None
    if cond.op == "absent":
        return fact is None
    if fact is None:
        return None
    if cond.value_fact is not None:
        other = facts.get(cond.value_fact)
        if other is None:
            return None
        target: Any = other.value * cond.scale if isinstance(other.value, (int, float)) else other.value
    else:
        target = cond.value
    return _compare(fact.value, cond.op or "==", target)


def _compare(value: Any, op: str, target: Any) -> bool:
    try:
        if op == "==":
            return value == target
        if op == "!=":
            return value != target
        if op == "in":
            return value in target
        if op == "not_in":
            return value not in target
        if op == "<":
            return value < target
        if op == "<=":
            return value <= target
        if op == ">":
            return value > target
        if op == ">=":
            return value >= target
    except TypeError:
        return False
    raise ValueError(f"unknown operator {op}")


_OPTIONAL = re.compile(r"\[\[(.*?)\]\]", re.S)


def fill(template: str, facts: Mapping[str, Fact]) -> str:
    """Fill `{fact}` placeholders; an absent fact prints as 'unknown', never as 0.

    A `[[...]]` segment is left out when a fact it names is absent, so a summary can say
    "(3.18 GiB available)" when it knows and nothing when it does not.
    """
    out, at = [], 0
    for m in _OPTIONAL.finditer(template):          # each piece filled once: a value may hold braces
        names = [name for _, name, _, _ in string.Formatter().parse(m.group(1)) if name]
        out.append(_fill(template[at:m.start()], facts))
        out.append(_fill(m.group(1), facts) if all(n in facts or n in THRESHOLDS for n in names) else "")
        at = m.end()
    out.append(_fill(template[at:], facts))
    return "".join(out)


def _fill(template: str, facts: Mapping[str, Fact]) -> str:
    out = []
    for literal, name, spec, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        if name in THRESHOLDS:
            out.append(format(THRESHOLDS[name], spec or ""))
            continue
        fact = facts.get(name)
        if fact is None:
            out.append("unknown")
            continue
        words = VALUE_WORDS.get(name)
        if not spec and words is not None and fact.value in words:
            out.append(words[fact.value])       # "weight loading", not loading_weights
            continue
        if not spec and isinstance(fact.value, int) and not isinstance(fact.value, bool):
            spec = ","          # 131,072 tokens, as every other figure in a report is written
        try:
            out.append(format(fact.value, spec or ""))
        except (ValueError, TypeError):
            out.append(str(fact.value))
    return "".join(out)


@dataclass
class Trace:
    """Every node's outcome, for --explain and for the ruled-out reasons."""

    outcome: dict[str, bool | None] = field(default_factory=dict)


def _walk(rules: RuleSet, nodes: tuple[Node, ...], facts: Mapping[str, Fact], trace: Trace,
          path: tuple[Node, ...], suppressed: Mapping[str, Suppression]) -> tuple[Node, ...] | None:
    chosen = None
    for node in nodes:
        result = evaluate(node.when, facts)
        trace.outcome[node.id] = result
        if result is not True:
            continue
        below = _walk(rules, rules.children.get(node.id, ()), facts, trace, path + (node,), suppressed)
        found = below or ((path + (node,)) if node.verdict and node.id not in suppressed else None)
        if chosen is None and found is not None:
            chosen = found
    return chosen


def _evidence(node: Node, facts: Mapping[str, Fact]) -> tuple[tuple[str, ...], tuple[SourceRef, ...]]:
    names = node.evidence or node.when.facts()
    names = tuple(n for n in names if n in facts)
    refs: list[SourceRef] = []
    for name in names:
        for ref in facts[name].evidence:
            if ref not in refs:
                refs.append(ref)
    refs.sort(key=lambda r: (r.path, r.line))
    return names, tuple(refs)


def _finding(node: Node, facts: Mapping[str, Fact], path: tuple[Node, ...]) -> Finding:
    names, refs = _evidence(node, facts)
    return Finding(
        rule_id=node.id, title=fill(node.title, facts), verdict=node.verdict, confidence=node.confidence,
        summary=fill(node.summary, facts), why=fill(node.why, facts), references=node.references,
        facts=names, evidence=refs, path=tuple(n.id for n in path), settle=fill(node.settle, facts),
        decided_by=fill(node.decided_by, facts))


def _ruled_out(rules: RuleSet, verdict: str, facts: Mapping[str, Fact], trace: Trace,
               silenced: list[SuppressedFinding]) -> tuple[list[RuledOut], list[RuledOut]]:
    """(ruled out, not assessed). A class is ruled out only by a check that cites a fact the input
    gave: a check that holds merely because facts are absent ("nothing failed" of an empty log) is not
    evidence, so that class is not assessed, with what the input would have to show."""
    out, unassessed = [], []
    for other in problems_first(rules.severities()):
        if other in (verdict, UNDECIDED):
            continue
        accepted = next((s for s in silenced if s.finding.verdict == other), None)
        if accepted is not None:
            why = accepted.suppression
            out.append(RuledOut(other, f"suppressed: {why.rule_id} fired but is accepted ({why.reason}; {why.origin})",
                                accepted.finding.facts, accepted.finding.evidence[:4]))
            continue
        cls = rules.classes[other]
        if _no_vllm_output(facts):          # another program's errors say nothing of vLLM's failure classes
            unassessed.append(RuledOut(other, _not_assessed([], facts), (), ()))
            continue
        for check in cls.ruled_out:
            names = tuple(n for n in check.when.facts() if n in facts)
            if names and evaluate(check.when, facts) is True:
                refs = tuple(dict.fromkeys(r for n in names for r in facts[n].evidence))[:4]
                out.append(RuledOut(other, fill(check.reason, facts), names, refs))
                break
        else:
            leaves = [n for n in rules.nodes.values() if n.verdict == other]
            unknown = [n for n in leaves if trace.outcome.get(n.id) is None and n.id in trace.outcome]
            missing = [f for f in FACTS if f not in facts and any(f in n.when.facts() for n in unknown)]
            unassessed.append(RuledOut(other, _not_assessed(missing, facts), tuple(missing), ()))
    return out, unassessed


def _no_vllm_output(facts: Mapping[str, Fact]) -> bool:
    vllm = facts.get("vllm_lines")
    return vllm is not None and vllm.value == 0


def _not_assessed(missing: list[str], facts: Mapping[str, Fact]) -> str:
    """Why a class could be neither confirmed nor ruled out, in words rather than fact names."""
    if _no_vllm_output(facts):
        return "the input holds no vLLM output"
    if not missing:
        return "nothing in the input speaks for or against it"
    shown = [_lower_first(FACTS[name].description.split(":")[0].rstrip(".")) for name in missing[:2]]
    return "missing from the input: " + "; ".join(shown)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def diagnose(rules: RuleSet, facts: Mapping[str, Fact], suppressed: Mapping[str, Suppression] | None = None,
             full: bool = True) -> Diagnosis:
    """The verdict, its reasoning path and the other classes ruled out; no fixes yet (capacity/prescribe.py
    sizes those for the chosen rule). `full=False` stops at the verdict: enough for the earlier attempts of a
    restarting server."""
    suppressed = suppressed or {}
    trace = Trace()
    chosen = _walk(rules, rules.roots, facts, trace, (), suppressed)
    findings: list[Finding] = []
    path_ids: tuple[str, ...]
    if chosen is None:
        verdict, confidence, path_ids = "inconclusive", "low", ()
    else:
        leaf = chosen[-1]
        verdict, confidence = leaf.verdict or "inconclusive", leaf.confidence or "low"
        path_ids = tuple(n.id for n in chosen)
        findings.append(_finding(leaf, facts, chosen))
    # Other leaves that fired tell the rest of the story (e.g. preemption before a crash); the
    # suppressed ones are kept apart, so the report can show them as SUPPRESSED.
    silenced: list[SuppressedFinding] = []
    for node in rules.nodes.values():
        fired = node.verdict and trace.outcome.get(node.id) is True and node.id not in path_ids \
            and all(trace.outcome.get(p) is True for p in _ancestors(rules, node))
        if fired and node.id in suppressed:
            silenced.append(SuppressedFinding(_finding(node, facts, _chain(rules, node)), suppressed[node.id]))
        elif fired and node.verdict not in (verdict, "healthy", "inconclusive") and not _no_vllm_output(facts):
            findings.append(_finding(node, facts, _chain(rules, node)))
    not_evaluated = tuple(sorted(n for n, r in trace.outcome.items() if r is None))
    ruled_out, not_assessed = _ruled_out(rules, verdict, facts, trace, silenced) if full else ([], [])
    return Diagnosis(verdict=verdict, confidence=confidence, rule_path=path_ids, findings=tuple(findings),
                     ruled_out=tuple(ruled_out), not_assessed=tuple(not_assessed), fixes=(), facts=dict(facts),
                     not_evaluated=not_evaluated, suppressed=tuple(silenced))


def _ancestors(rules: RuleSet, node: Node) -> list[str]:
    out = []
    while node.parent:
        out.append(node.parent)
        node = rules.nodes[node.parent]
    return out


def _chain(rules: RuleSet, node: Node) -> tuple[Node, ...]:
    return tuple(rules.nodes[i] for i in reversed(_ancestors(rules, node))) + (node,)
