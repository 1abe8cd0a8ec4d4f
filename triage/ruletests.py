"""`vtriage rules --test`: run every rule's examples and every signature's samples, like `semgrep --test`.

A rule's examples say where it must fire and where it must stay quiet; a signature's samples are lines
it must match, and no other signature may claim one unless the signature declares it in `also`. The
test suite (tests/test_rules.py, tests/test_signatures.py) runs these same checks, so a team editing
its own rules checks them the way the project checks its own, without pytest.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from .decide.engine import evaluate
from .decide.ruleset import Example, Node, RuleSet
from .logs.envelope import records
from .logs.signature_files import Signature
from .logs.signatures import SignatureSet
from .metrics.inputs import read_files
from .model import Report
from .pipeline import Incident, Toolkit, build_report
from .selftest import bundled_fixtures
from .sources.files import LogInput, open_log


@dataclass(frozen=True, slots=True)
class Failure:
    """One example or sample that does not behave as its file says."""

    file: str
    key: str                     # "examples[2]", "signature cuda_oom.samples[0]"
    problem: str

    def line(self) -> str:
        return f"{self.file}: {self.key}: {self.problem}"


@dataclass(frozen=True, slots=True)
class Outcome:
    examples: int                # rule examples run
    samples: int                 # signature samples run
    failures: tuple[Failure, ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        failed_examples = sum(1 for f in self.failures if not f.key.startswith("signature "))
        failed_samples = len(self.failures) - failed_examples
        verdict = "all passed" if self.passed else f"{len(self.failures)} failed"
        return (f"{self.examples - failed_examples}/{self.examples} rule examples and "
                f"{self.samples - failed_samples}/{self.samples} signature samples passed: {verdict}")


def fixture_dirs(rules_dir: Path) -> tuple[Path, ...]:
    """Where examples' `fixture` (logs/) and `metrics` files are looked up: a fixtures/ folder inside or
    beside the rules directory (a team's own), then the bundled fixtures."""
    beside = (rules_dir / "fixtures", rules_dir.parent / "fixtures")
    return tuple(d for d in beside if d.is_dir()) + (bundled_fixtures(),)


def _find(dirs: Sequence[Path], folder: str, name: str) -> Path:
    for d in dirs:
        path = d / folder / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"{folder}/{name} is not under {' or '.join(str(d) for d in dirs)}")


def example_report(kit: Toolkit, example: Example, dirs: Sequence[Path]) -> Report:
    """The whole pipeline on one example: its fixture log or inline log, joined with its /metrics snapshots."""
    tmp = None
    if example.log is not None:
        fd, tmp = tempfile.mkstemp(suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(example.log.lstrip("\n"))
    try:
        logs = (LogInput(name="log.txt", path=tmp),) if tmp else \
            (open_log(str(_find(dirs, "logs", example.fixture))),) if example.fixture else ()
        if not example.metrics:
            return build_report(Incident(logs=logs), kit)
        read = read_files([str(_find(dirs, "metrics", m)) for m in example.metrics], None)
        return build_report(Incident(logs=logs, metrics=read), kit)
    finally:
        if tmp:
            Path(tmp).unlink()


def fired(rules: RuleSet, report: Report, node_id: str) -> bool:
    """A node fired when it and all its ancestors hold for the diagnosed attempt."""
    facts = report.diagnosis.facts
    chain = [rules.nodes[node_id]]
    while chain[-1].parent:
        chain.append(rules.nodes[chain[-1].parent])
    return all(evaluate(n.when, facts) is True for n in chain)


def example_problem(kit: Toolkit, node: Node, example: Example, dirs: Sequence[Path]) -> str | None:
    """None when the rule fires (or stays quiet) on the example as the file says; else what went wrong."""
    try:
        report = example_report(kit, example, dirs)
    except FileNotFoundError as exc:
        return str(exc)
    if fired(kit.rules, report, node.id) == (example.expect == "fires"):
        return None
    d = report.diagnosis
    wanted, did = ("fire", "stayed quiet") if example.expect == "fires" else ("stay quiet", "fired")
    return f"expected to {wanted}, but it {did} (verdict {d.verdict} via {' > '.join(d.rule_path) or '-'})"


def sample_problem(signatures: SignatureSet, sig: Signature, sample: str, first: bool = False) -> str | None:
    """None when `sample` is matched by its signature and by no other it does not declare in `also`, and
    (the `first` sample of a signature with fields) yields a field; else what went wrong."""
    ids: set[str] = set()
    extracted = None
    for rec in records([(1, sample)]):
        ids.update(s.id for s, _, _ in signatures.match(rec.message))
        if extracted is None and first and sig.fields:
            got = signatures.extract(sig, rec.message)
            extracted = got[0] if got is not None else None
    if sig.id not in ids:
        return "does not match its own signature"
    extra = sorted(ids - {sig.id} - set(sig.also))
    if extra:
        return f"also matched by {', '.join(extra)} (declare it in `also`, or make the regexes tell them apart)"
    if first and sig.fields and not extracted:
        return "matched, but no field was extracted"
    return None


def _example_failures(kit: Toolkit, dirs: Sequence[Path]) -> Iterator[Failure]:
    for node in sorted(kit.rules.nodes.values(), key=lambda n: n.path):
        for i, example in enumerate(node.examples):
            problem = example_problem(kit, node, example, dirs)
            if problem:
                where = f" ({example.fixture or ', '.join(example.metrics) or 'inline log'})"
                yield Failure(node.path, f"examples[{i}]{where}", problem)


def _sample_failures(signatures: SignatureSet) -> Iterator[Failure]:
    for sig in signatures.signatures:
        for i, (sample, key) in enumerate(zip(sig.samples, sig.sample_keys())):
            problem = sample_problem(signatures, sig, sample, first=i == 0)
            if problem:
                yield Failure(sig.origin, f"signature {sig.id}.{key}", problem)


def run_rule_tests(kit: Toolkit, rules_dir: Path) -> Outcome:
    """Every example of every rule in `kit` and every sample of every signature, failures in file order."""
    dirs = fixture_dirs(rules_dir)
    failures = (*_example_failures(kit, dirs), *_sample_failures(kit.signatures))
    return Outcome(examples=sum(len(n.examples) for n in kit.rules.nodes.values()),
                   samples=sum(len(s.samples) for s in kit.signatures.signatures), failures=failures)
