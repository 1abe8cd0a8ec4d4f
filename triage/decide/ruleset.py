"""Load and validate the decision tree in rules/*.toml and the verdict classes in rules/classes/.

One node per file, the file named after its `id`. Conditions name facts from the closed registry;
fixes name capacity-model solvers; summaries name facts in `{placeholders}`. Anything unknown or
malformed stops the tool with the file, the key and a hint.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from .. import tomlread
from ..bundled import bundled_dir
from ..errors import RuleError, did_you_mean
from ..facts.registry import FACTS
from ..vocabulary import CONFIDENCES, FACT_VALUES, FIX_NAMES, SEVERITIES, THRESHOLDS, VERDICTS

OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "not_in", "present", "absent")
_NODE_KEYS = {"id", "parent", "order", "title", "when", "verdict", "confidence", "summary", "why", "settle",
              "decided_by", "fixes",
              "references", "evidence", "examples"}
_CONDITION_KEYS = {"fact", "op", "value", "value_fact", "scale", "all", "any", "not"}
_EXAMPLE_KEYS = {"fixture", "log", "metrics", "expect"}
_CLASS_KEYS = {"verdict", "title", "heading", "ruled_out", "runbook", "severity"}
_RULED_OUT_KEYS = {"when", "reason"}


@dataclass(frozen=True, slots=True)
class Condition:
    """A predicate on one fact, or all/any/not of others. `key` is where it sits in its file."""

    key: str
    fact: str | None = None
    op: str | None = None
    value: Any = None
    value_fact: str | None = None
    scale: float = 1.0
    combinator: str | None = None                 # "all" | "any" | "not"
    children: tuple["Condition", ...] = ()

    def facts(self) -> tuple[str, ...]:
        names = [n for n in (self.fact, self.value_fact) if n]
        for child in self.children:
            names.extend(child.facts())
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class Example:
    expect: str                                   # "fires" | "quiet"
    fixture: str | None                           # a log under fixtures/logs/
    log: str | None
    metrics: tuple[str, ...] = ()                 # /metrics snapshots under fixtures/metrics/, oldest first


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    parent: str | None
    order: int
    title: str
    when: Condition
    verdict: str | None
    confidence: str | None
    summary: str
    why: str
    settle: str                                   # the line that would settle a verdict the input cannot prove
    decided_by: str                               # the comparison that decided, when the verdict's own is not it
    fixes: tuple[str, ...]
    references: tuple[str, ...]
    evidence: tuple[str, ...]
    examples: tuple[Example, ...]
    path: str


@dataclass(frozen=True, slots=True)
class RuledOutCheck:
    when: Condition
    reason: str


@dataclass(frozen=True, slots=True)
class VerdictClass:
    verdict: str
    title: str
    runbook: str
    ruled_out: tuple[RuledOutCheck, ...]
    severity: str                                 # one of SEVERITIES: what --fail-on and alerts gate on
    heading: str = ""                             # the short title a report leads with ("Weights don't fit")


@dataclass(frozen=True, slots=True)
class RuleSet:
    nodes: Mapping[str, Node]
    roots: tuple[Node, ...]
    children: Mapping[str, tuple[Node, ...]]
    classes: Mapping[str, VerdictClass]
    directory: Path

    def severities(self) -> dict[str, str]:
        """Each verdict's severity, as its class gives it."""
        return {verdict: cls.severity for verdict, cls in self.classes.items()}


def default_rules_dir() -> Path:
    return bundled_dir("triage.rules_data")


_LISTINGS = {"facts": "`vtriage rules --facts` lists the facts", "fixes": "`vtriage rules --fixes` lists the fixes",
             "nodes": "`vtriage rules` shows the tree"}


def _hint(name: str, known: Iterable[str], what: str) -> str:
    """'did you mean ...?' when something is close, else where to look."""
    known = list(known)
    return did_you_mean(name, known) or _LISTINGS.get(what) or f"one of {', '.join(sorted(known))}"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomlread.loads(path.read_text(encoding="utf-8"))
    except tomlread.TOMLDecodeError as exc:
        raise RuleError(str(path), "(file)", f"not valid TOML: {exc}", "check quotes and brackets") from None
    except RecursionError:
        raise RuleError(str(path), "(file)", "nested too deeply to read", "a rule file is flat tables") from None
    except UnicodeDecodeError:
        raise RuleError(str(path), "(file)", "not UTF-8 text", "save the rule file as UTF-8") from None


def _check_keys(path: Path, key: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    for name in table:
        if name not in allowed:
            raise RuleError(str(path), f"{key}.{name}".lstrip("."), "unknown key", _hint(name, allowed, "keys"))


def parse_condition(path: Path, key: str, raw: Any) -> Condition:
    """Turn a TOML condition table into a Condition, checking every fact name and operator."""
    if not isinstance(raw, dict):
        raise RuleError(str(path), key, "a condition must be a table",
                        "e.g. { fact = \"failure_kind\", op = \"==\", value = \"cuda_oom\" }")
    _check_keys(path, key, raw, _CONDITION_KEYS)
    combinators = [c for c in ("all", "any", "not") if c in raw]
    if combinators:
        if len(combinators) > 1 or "fact" in raw:
            raise RuleError(str(path), key, "use one of all/any/not, or a fact, per table", "nest tables to combine")
        comb = combinators[0]
        items = raw[comb]
        if comb == "not":
            items = [items]
        if not isinstance(items, list) or not items:
            raise RuleError(str(path), f"{key}.{comb}", "must be a non-empty list of conditions")
        children = tuple(parse_condition(path, f"{key}.{comb}[{i}]" if comb != "not" else f"{key}.not", item)
                         for i, item in enumerate(items))
        return Condition(key=key, combinator=comb, children=children)
    fact = raw.get("fact")
    if not isinstance(fact, str):
        raise RuleError(str(path), f"{key}.fact", "missing fact name", "every predicate names a fact")
    if fact not in FACTS:
        raise RuleError(str(path), f"{key}.fact", f"unknown fact {fact!r}", _hint(fact, FACTS, "facts"))
    op = raw.get("op")
    if op not in OPS:
        raise RuleError(str(path), f"{key}.op", f"unknown operator {op!r}", f"one of {', '.join(OPS)}")
    value_fact = raw.get("value_fact")
    if value_fact is not None and value_fact not in FACTS:
        raise RuleError(str(path), f"{key}.value_fact", f"unknown fact {value_fact!r}",
                        _hint(value_fact, FACTS, "facts"))
    if op in ("present", "absent"):
        if "value" in raw or value_fact:
            raise RuleError(str(path), f"{key}.value", f"'{op}' takes no value")
    elif ("value" in raw) == (value_fact is not None):
        raise RuleError(str(path), key, f"operator {op!r} needs exactly one of value or value_fact")
    value = raw.get("value")
    spec = FACTS[fact]
    if isinstance(value, str) and op in ("<", "<=", ">", ">="):
        if value not in THRESHOLDS:
            raise RuleError(str(path), f"{key}.value", f"unknown threshold {value!r}",
                            did_you_mean(value, THRESHOLDS) or f"a number, or one of {', '.join(THRESHOLDS)}")
        value = THRESHOLDS[value]          # the vocabulary's line, named rather than copied into the rule
    if op in ("in", "not_in") and not isinstance(value, list):
        raise RuleError(str(path), f"{key}.value", f"'{op}' needs a list")
    if op in ("<", "<=", ">", ">=") and value is not None and (not isinstance(value, (int, float))
                                                               or spec.type not in (int, float)):
        raise RuleError(str(path), f"{key}.op", f"'{op}' compares numbers but {fact} is {spec.type.__name__}"
                        if spec.type not in (int, float) else f"'{op}' needs a number")
    if op in ("==", "!=") and value is not None and spec.type is bool and not isinstance(value, bool):
        raise RuleError(str(path), f"{key}.value", f"{fact} is true/false", "write value = true or value = false")
    if fact in FACT_VALUES and op in ("==", "!=", "in", "not_in") and value is not None:
        _check_words(path, key, fact, value)
    scale = raw.get("scale", 1.0)
    if not isinstance(scale, (int, float)) or "scale" in raw and value_fact is None:
        raise RuleError(str(path), f"{key}.scale", "scale multiplies value_fact and must be a number")
    return Condition(key=key, fact=fact, op=op, value=value, value_fact=value_fact, scale=float(scale))


def _check_words(path: Path, key: str, fact: str, value: Any) -> None:
    """A fact whose values are words of the vocabulary (failure kinds, phases) compared to another word
    is a typo: the condition could never hold."""
    words = FACT_VALUES[fact]
    items = ([(f"{key}.value[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list)
             else [(f"{key}.value", value)])
    for where, word in items:
        if not isinstance(word, str) or word not in words:
            raise RuleError(str(path), where, f"{fact} is never {word!r}", _hint(str(word), words, "words"))


def _check_template(path: Path, key: str, template: str) -> None:
    if template.count("[[") != template.count("]]") or "[[[" in template:
        raise RuleError(str(path), key, "unbalanced [[optional]] segment", "write [[text with {fact}]] without nesting")
    try:
        parsed = list(string.Formatter().parse(template.replace("[[", "").replace("]]", "")))
    except ValueError as exc:
        raise RuleError(str(path), key, f"bad template: {exc}", "use {fact_name} or {fact_name:.2f}") from None
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if name in THRESHOLDS:
            continue
        if name not in FACTS:
            raise RuleError(str(path), key, f"unknown placeholder {{{name}}}", _hint(name, FACTS, "facts"))
        if spec and spec[-1:] in "fe%" and FACTS[name].type not in (int, float):
            raise RuleError(str(path), key,
                            f"placeholder {{{name}:{spec}}} formats a number but {name} is {FACTS[name].type.__name__}")


def _load_node(path: Path, fix_names: set[str]) -> Node:
    raw = _read_toml(path)
    _check_keys(path, "", raw, _NODE_KEYS)
    for required in ("id", "title", "when"):
        if required not in raw:
            raise RuleError(str(path), required, "missing required key")
    if raw["id"] != path.stem:
        raise RuleError(str(path), "id", f"id {raw['id']!r} does not match the file name",
                        f"rename the file to {raw['id']}.toml or set id = {path.stem!r}")
    verdict = raw.get("verdict")
    if verdict is not None and verdict not in VERDICTS:
        raise RuleError(str(path), "verdict", f"unknown verdict {verdict!r}", f"one of {', '.join(VERDICTS)}")
    confidence = raw.get("confidence")
    if verdict is not None and confidence not in CONFIDENCES:
        raise RuleError(str(path), "confidence", f"a verdict needs a confidence, got {confidence!r}",
                        f"one of {', '.join(CONFIDENCES)}")
    for key in ("summary", "why", "settle", "decided_by", "title"):
        if key in raw:
            if not isinstance(raw[key], str):
                raise RuleError(str(path), key, "must be a string")
            _check_template(path, key, raw[key])
    fixes = raw.get("fixes", [])
    if not isinstance(fixes, list):
        raise RuleError(str(path), "fixes", "must be a list of fix names")
    for i, name in enumerate(fixes):
        if name not in fix_names:
            raise RuleError(str(path), f"fixes[{i}]", f"unknown fix {name!r}", _hint(str(name), fix_names, "fixes"))
    evidence = raw.get("evidence", [])
    for i, name in enumerate(evidence):
        if name not in FACTS:
            raise RuleError(str(path), f"evidence[{i}]", f"unknown fact {name!r}", _hint(str(name), FACTS, "facts"))
    examples = []
    for i, ex in enumerate(raw.get("examples", [])):
        if not isinstance(ex, dict):
            raise RuleError(str(path), f"examples[{i}]", "must be a table")
        _check_keys(path, f"examples[{i}]", ex, _EXAMPLE_KEYS)
        if ex.get("expect") not in ("fires", "quiet"):
            raise RuleError(str(path), f"examples[{i}].expect", "must be \"fires\" or \"quiet\"")
        if "fixture" in ex and "log" in ex:
            raise RuleError(str(path), f"examples[{i}]", "give one of fixture or log, not both")
        metrics = ex.get("metrics", [])
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise RuleError(str(path), f"examples[{i}].metrics", "must be a list of snapshot files",
                            'e.g. metrics = ["v1-preempting-0.prom", "v1-preempting-1.prom"] (under fixtures/metrics/)')
        if "fixture" not in ex and "log" not in ex and not metrics:
            raise RuleError(str(path), f"examples[{i}]", "give a fixture, a log or metrics")
        examples.append(Example(ex["expect"], ex.get("fixture"), ex.get("log"), tuple(metrics)))
    order = raw.get("order", 100)
    if not isinstance(order, int):
        raise RuleError(str(path), "order", "must be an integer")
    return Node(
        id=raw["id"], parent=raw.get("parent") or None, order=order, title=raw["title"],
        when=parse_condition(path, "when", raw["when"]), verdict=verdict, confidence=confidence,
        summary=raw.get("summary", raw["title"]), why=raw.get("why", ""),
        settle=raw.get("settle", ""), decided_by=raw.get("decided_by", ""), fixes=tuple(fixes),
        references=tuple(raw.get("references", [])), evidence=tuple(evidence), examples=tuple(examples),
        path=str(path))


def _load_classes(directory: Path) -> dict[str, VerdictClass]:
    classes: dict[str, VerdictClass] = {}
    folder = directory / "classes"
    for path in sorted(folder.glob("*.toml")):
        raw = _read_toml(path)
        _check_keys(path, "", raw, _CLASS_KEYS)
        verdict = raw.get("verdict")
        if verdict not in VERDICTS:
            raise RuleError(str(path), "verdict", f"unknown verdict {verdict!r}", f"one of {', '.join(VERDICTS)}")
        if verdict != path.stem:
            raise RuleError(str(path), "verdict", "must match the file name", f"name the file {verdict}.toml")
        severity = raw.get("severity")
        if severity not in SEVERITIES:
            raise RuleError(str(path), "severity", f"unknown severity {severity!r}", f"one of {', '.join(SEVERITIES)}")
        checks = []
        for i, entry in enumerate(raw.get("ruled_out", [])):
            _check_keys(path, f"ruled_out[{i}]", entry, _RULED_OUT_KEYS)
            if "when" not in entry or "reason" not in entry:
                raise RuleError(str(path), f"ruled_out[{i}]", "needs when and reason")
            _check_template(path, f"ruled_out[{i}].reason", entry["reason"])
            checks.append(RuledOutCheck(parse_condition(path, f"ruled_out[{i}].when", entry["when"]), entry["reason"]))
        for key in ("title", "heading"):
            if not isinstance(raw.get(key, ""), str):
                raise RuleError(str(path), key, "must be a string")
        title = raw.get("title", verdict)
        classes[verdict] = VerdictClass(verdict, title, raw.get("runbook", ""), tuple(checks), severity,
                                        raw.get("heading", title))
    missing = [v for v in VERDICTS if v not in classes]
    if missing:
        raise RuleError(str(folder), "classes", f"no class file for {', '.join(missing)}",
                        "add rules/classes/<verdict>.toml")
    return classes


def load_rules(directory: Path | None = None, fix_names: Iterable[str] | None = None) -> RuleSet:
    """Load every node, check the tree (parents exist, no cycles) and the verdict classes."""
    directory = Path(directory or default_rules_dir())
    names = set(fix_names if fix_names is not None else FIX_NAMES)
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise RuleError(str(directory), "(directory)", "no rule files (*.toml) found",
                        "point --rules at the rules/ directory")
    nodes = {}
    for path in files:
        node = _load_node(path, names)
        nodes[node.id] = node
    for node in nodes.values():
        if node.parent and node.parent not in nodes:
            raise RuleError(node.path, "parent", f"unknown parent {node.parent!r}", _hint(node.parent, nodes, "nodes"))
    for node in nodes.values():
        seen, current = {node.id}, node
        while current.parent:
            if current.parent in seen:
                raise RuleError(node.path, "parent", "the parents form a cycle", "a tree has no loops")
            seen.add(current.parent)
            current = nodes[current.parent]
    children: dict[str, list[Node]] = {}
    for node in nodes.values():
        if node.parent:
            children.setdefault(node.parent, []).append(node)
    ordered = {k: tuple(sorted(v, key=lambda n: (n.order, n.id))) for k, v in children.items()}
    roots = tuple(sorted((n for n in nodes.values() if not n.parent), key=lambda n: (n.order, n.id)))
    return RuleSet(nodes=nodes, roots=roots, children=ordered, classes=_load_classes(directory), directory=directory)
