"""Judgement on what an excerpt holds: an error is never 'no error', a failure is never healthy, and a
verdict that rests on less than the decisive line says which line would settle it."""
from __future__ import annotations

import re

import pytest

from triage.decide.ruleset import load_rules
from triage.render.text import render_text

from conftest import FIXTURES, RULES_DIR, diagnose_files, diagnose_text

RULES = load_rules(RULES_DIR)
# Lines that say something went wrong, whatever vtriage makes of them.
ERROR_LINE = re.compile(r"Traceback \(most recent|\b[A-Z]\w*(?:Error|Exception):|Error executing method|"
                        r"Engine background task failed|EngineCore failed to start|(?:CUDA|HIP) out of mem")
LOGS = sorted(p for p in (FIXTURES / "logs").rglob("*") if p.is_file())
EXAMPLES = [(n.id, i, ex.log) for n in RULES.nodes.values() for i, ex in enumerate(n.examples) if ex.log]


def _read(path):
    import bz2
    import gzip
    import lzma
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


def _check(report, text: str) -> None:
    if not ERROR_LINE.search(text):
        return
    said = render_text(report)
    d = report.diagnosis
    survived = "transient_errors" in d.facts or "shut_down" in d.facts
    assert "nothing failed" not in said or survived, said
    assert "no error stopped" not in said or survived, said
    if d.verdict == "healthy":
        assert survived, f"healthy although the input holds an error it did not survive: {d.rule_path}"


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(FIXTURES / "logs")))
def test_an_error_in_a_fixture_is_never_called_no_error(kit, path):
    _check(diagnose_files(kit, path), _read(path))


@pytest.mark.parametrize("rule,index,log", EXAMPLES, ids=[f"{r}:{i}" for r, i, _ in EXAMPLES])
def test_an_error_in_a_rule_example_is_never_called_no_error(kit, rule, index, log):
    _check(diagnose_text(kit, log.lstrip("\n")), log)


@pytest.mark.parametrize("node", [n for n in RULES.nodes.values() if n.verdict and n.confidence != "high"],
                         ids=lambda n: n.id)
def test_every_uncertain_verdict_says_what_would_settle_it(node):
    assert node.settle.strip(), f"{node.id} ({node.confidence} confidence) must say which line would settle it"


@pytest.mark.parametrize("excerpt,verdict,phase_fact,phase", [
    # The last line a ticket kept is a cut traceback: the phase comes from the lines before it, and the phase
    # gives the likeliest class (the profiling run's batch not fitting next to the weights).
    ("INFO 05-24 22:18:27 model_runner.py:104] Loading model weights took 15.2 GB\nTraceback (most rec",
     "kv_cache_too_small", "failed_phase", "memory_profiling"),
    ("(RayWorkerWrapper pid=7) ERROR 03-02 00:36:13 worker_base.py:581] Error executing method 'load_model'.",
     "weights_dont_fit", "failed_phase", "loading_weights"),
    # The figure alone decides, with no error line at all.
    ("(EngineCore_DP0 pid=9) INFO 10-14 08:12:40 [gpu_worker.py:298] Available KV cache memory: -1.27 GiB",
     "kv_cache_too_small", "reached_phase", "kv_cache_allocation"),
    # An OOM cut mid-number is still an OOM; with no startup line its phase is unknown.
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2", "inconclusive", None, None),
])
def test_a_cut_excerpt_is_read_for_what_it_holds(kit, excerpt, verdict, phase_fact, phase):
    d = diagnose_text(kit, excerpt + "\n").diagnosis
    assert d.verdict == verdict, d.rule_path
    if phase_fact:
        assert d.facts[phase_fact].value == phase
    assert d.findings[0].settle or d.confidence == "high"
