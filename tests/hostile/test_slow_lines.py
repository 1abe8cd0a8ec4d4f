"""The slow-line set: single lines built to make a regex or a splitter go quadratic (or worse).
Each must cost about what its length costs. Time bounds are generous (a shared, noisy machine):
the old behaviour took minutes on these lines, the bounds are seconds."""
from __future__ import annotations

import shutil
import time

import pytest

from triage.logs.envelope import records
from triage.logs.signatures import MatchBudget, load_signatures
from triage.redact import Redactor
from triage.sources import files as sources
from triage.sources.files import LineReader, open_log

from conftest import RULES_DIR, run_cli
from hostile_support import run_measured
from shapes import KV, SLOW_LINES


@pytest.mark.parametrize("name", sorted(SLOW_LINES))
def test_each_slow_line_costs_what_its_length_does(name):
    line = SLOW_LINES[name]
    start = time.monotonic()
    for record in records([(1, line)]):
        Redactor(prompts=True).text(record.text)
    assert time.monotonic() - start < 10, name


def test_bundled_signatures_never_time_out_on_their_own_anchors_repeated():
    """Every bundled pattern given a line of its anchor (or first sample) repeated: no search is given up."""
    budget = MatchBudget()
    signatures = load_signatures()
    for sig in signatures.signatures:
        for line in (sig.anchor * (100_000 // len(sig.anchor)),
                     (sig.samples[0] + " ") * (50_000 // len(sig.samples[0]) + 1)):
            signatures.extract(sig, line, budget)
    assert not budget.slow, budget.slow


def test_the_whole_slow_line_set_through_the_command_line(tmp_path):
    path = tmp_path / "slow.log"
    path.write_text("\n".join([*SLOW_LINES.values(), KV]) + "\n")
    run = run_measured("--format", "json", "--redact-prompts", str(path), limit_s=300)
    assert run.returncode == 1, run.stderr
    assert run.report()["verdict"] == "kv_cache_too_small"
    assert run.seconds < 90 and run.peak_mib < 600, (run.seconds, run.peak_mib)


def test_a_line_longer_than_many_pieces_is_scanned_once(tmp_path, monkeypatch):
    """A 24 MiB line with no newline split in 64 KiB pieces: each piece used to read to the line's end."""
    monkeypatch.setattr(sources, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "PIECE_BYTES", 64 << 10)
    path = tmp_path / "one-line.log"
    with path.open("wb") as handle:
        handle.write(KV.encode() + b"\n")
        for _ in range(24):
            handle.write(b"y" * (1 << 20))
        handle.write(b"\n" + KV.encode() + b"\n")
    start = time.monotonic()
    reader = LineReader(open_log(str(path)))
    lines = list(reader)
    assert time.monotonic() - start < 30
    assert [n for n, _ in lines] == [1, 2, 3] and reader.result().cut_lines == 1


SLOW_SIGNATURE = """
[[signature]]
id = "catastrophic"
kind = "exception"
anchor = "x"
regex = '(x|xx)+y'           # exponential: the regex module cannot shortcut it
source = "a test's own"
bands = { v1 = "xxy" }
samples = ["xxy"]
"""


def test_a_slow_custom_pattern_has_a_total_budget_and_a_warning(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(RULES_DIR, rules, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    (rules / "signatures" / "zz-slow.toml").write_text(SLOW_SIGNATURE)
    log = tmp_path / "slow.log"
    log.write_text("\n".join(["x" * 40] * 300 + [KV]) + "\n")
    run = run_measured("--format", "json", "--rules", str(rules), "--no-config", str(log), limit_s=300)
    assert run.returncode == 1, run.stderr
    report = run.report()
    assert report["verdict"] == "kv_cache_too_small"
    warning = next(w for w in report["warnings"] if "pattern too slow" in w)
    assert "301 line(s) skipped" in warning and "catastrophic" in warning   # the KV line has an x too
    # 300 lines x 0.25 s would be 75 s; the budget stops at about 5 s of timeouts
    assert run.seconds < 40, run.seconds


def test_rules_warns_about_nested_quantifiers(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(RULES_DIR, rules, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    (rules / "signatures" / "zz-slow.toml").write_text(SLOW_SIGNATURE)
    result = run_cli("rules", "--rules", str(rules))
    assert result.returncode == 0
    err = result.stderr.decode()
    assert "signature catastrophic.regex" in err and "exponential" in err and err.count("\n") == 1
    assert run_cli("rules").stderr == b"", "the bundled signatures have none"
