"""The runbook pages (docs/runbooks/<verdict>.md) and the link a report gives to its verdict's page.

The pages ship inside the package (pyproject maps docs/runbooks to triage.runbooks_data), so an
installed `vtriage explain VERDICT` prints the same text the repository shows: there is one copy.
"""
from __future__ import annotations

from ..bundled import bundled_dir
from ..decide.ruleset import RuleSet
from ..errors import InputError, did_you_mean
from ..vocabulary import VERDICTS

SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation")


def runbook_text(verdict: str) -> str:
    """The page for one verdict, as Markdown."""
    return (bundled_dir("triage.runbooks_data") / f"{verdict}.md").read_text(encoding="utf-8")


def resolve_topic(topic: str, rules: RuleSet) -> str:
    """`vtriage explain` takes a verdict or the id of a rule that gives one; returns the verdict."""
    if topic in VERDICTS:
        return topic
    node = rules.nodes.get(topic)
    if node is not None and node.verdict:
        return node.verdict
    if node is not None:
        raise InputError(topic, "is a decision-tree branch, not a verdict",
                         "give a verdict or a rule that ends in one (vtriage rules shows the tree)")
    hint = did_you_mean(topic, [*VERDICTS, *rules.nodes]) or f"one of {', '.join(VERDICTS)}"
    raise InputError(topic, "no such verdict or rule", hint)


def runbook_link(verdict: str, rules: RuleSet, url_template: str | None = None) -> str | None:
    """Where the report points for `verdict`: the team's own URL when configured (`runbook_url` in
    .vtriage.toml, with {verdict} in it), else the page named by the verdict class."""
    if url_template:
        return url_template.replace("{verdict}", verdict)
    cls = rules.classes.get(verdict)
    return cls.runbook if cls and cls.runbook else None
