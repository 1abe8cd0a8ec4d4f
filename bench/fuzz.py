#!/usr/bin/env python3
"""Coverage-guided fuzzing of the log and metrics parsers, for a fixed time.

Feeds arbitrary bytes through the whole middle of the pipeline (envelope stripping, signatures,
wrap joining, attempts, facts, the decision tree, the JSON report) and the metrics parser. Anything
but a clean result or an InputError is a bug: the crashing input is written to --crashes.
Uses atheris (pip install atheris) for coverage guidance; without it, falls back to hypothesis.

usage: python bench/fuzz.py [--seconds 60] [--crashes DIR]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_target():
    from triage.cli import load_toolkit
    from triage.engine import diagnose
    from triage.errors import InputError
    from triage.facts import extract_facts
    from triage.logparse import LogParse, split_attempts
    from triage.metricparse import parse_exposition
    from triage.redact import Redactor

    kit = load_toolkit(None)

    def target(data: bytes) -> None:
        lines = [(n, raw.decode("utf-8", "replace").rstrip("\r"))
                 for n, raw in enumerate(data.split(b"\n"), start=1)]
        parse = LogParse("fuzz.log", lines, kit.signatures, Redactor())
        for attempt in split_attempts(parse, kit.signatures):
            diagnose(kit.rules, extract_facts(attempt.events, kit.signatures))
        assert parse.summary.lines_recognised <= parse.summary.lines_read
        try:
            parse_exposition(data.decode("utf-8", "replace"), "fuzz.prom")
        except InputError:
            pass
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--crashes", default=str(ROOT / "bench" / "out" / "crashes"))
    args = parser.parse_args()
    Path(args.crashes).mkdir(parents=True, exist_ok=True)
    corpus = [p.read_bytes()[:4000] for p in sorted((ROOT / "fixtures" / "logs").rglob("*.log"))]
    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is not None:
        with atheris.instrument_imports():
            target = make_target()
        seeds = Path(args.crashes).parent / "fuzz-corpus"
        seeds.mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(corpus):
            (seeds / f"seed-{i}").write_bytes(data)
        atheris.Setup([sys.argv[0], f"-max_total_time={args.seconds}", f"-artifact_prefix={args.crashes}/",
                       "-max_len=8192", str(seeds)], target)
        atheris.Fuzz()
    else:
        from hypothesis import given, settings, strategies as st
        target = make_target()
        deadline = time.monotonic() + args.seconds

        @settings(max_examples=10**9, deadline=None, database=None)
        @given(st.one_of(st.binary(max_size=4000), st.sampled_from(corpus)))
        def run(data: bytes) -> None:
            if time.monotonic() > deadline:
                raise TimeoutError
            target(data)
        try:
            run()
        except TimeoutError:
            print(f"fuzzed for {args.seconds} s: no failure")


if __name__ == "__main__":
    main()
