#!/usr/bin/env python3
"""Coverage-guided fuzzing of the whole pipeline, for a fixed time, seeded with every hostile shape.

Each input is written to a file and read the way a user's log is (sources: compression sniffing,
decompression, UTF-16, cut archives), parsed, diagnosed, and rendered in every format; the same bytes
are parsed as two /metrics snapshots too. Anything but a clean result or an InputError is a bug, and so
is NaN or an infinity in the JSON report, or an input that takes far longer than its size should (a
regex or a loop gone quadratic): the input is written to --crashes.

The seeds are the fixture logs and tests/hostile/shapes.py: the slow-line set, the secret matrix's
forms, absurd figures in every line that carries one, /metrics with NaN and 1e400, cut, corrupt,
multi-member and trailing-garbage archives, UTF-16, JSON nested past the parser's depth.
Uses atheris (pip install atheris) for coverage guidance; without it, hypothesis mutates the seeds.

usage: python bench/fuzz.py [--seconds 60] [--crashes DIR] [--max-len 65536]
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import importlib.util
import json
import lzma
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SLOW_S = 5.0            # an input may take this long, plus SLOW_S_PER_MB per MB of it, before it counts as a bug
SLOW_S_PER_MB = 20.0


class SlowInput(Exception):
    """An input that took far longer than its size: the fuzzer keeps it like a crash."""


def make_target():
    from triage.cli import load_toolkit
    from triage.errors import InputError
    from triage.facts.metric_samples import extract_metric_facts
    from triage.metrics.parse import Snapshot, order_snapshots, parse_exposition
    from triage.pipeline import Incident, build_report
    from triage.render import RENDERERS
    from triage.sources.files import open_log

    kit = load_toolkit(None)
    path = os.path.join(tempfile.mkdtemp(prefix="vtriage-fuzz-"), "fuzz.log")

    def no_constant(name: str) -> None:
        raise AssertionError(f"{name} in the JSON report")

    def target(data: bytes) -> None:
        start = time.monotonic()
        with open(path, "wb") as handle:
            handle.write(data)
        try:
            report = build_report(Incident(logs=(open_log(path),)), kit)
        except InputError:
            report = None
        if report is not None:
            assert all(i.lines_recognised <= i.lines_read for i in report.inputs)
            for render in RENDERERS.values():
                render(report)
            json.loads(RENDERERS["json"](report), parse_constant=no_constant)
        try:
            samples = tuple(parse_exposition(data.decode("utf-8", "replace"), "fuzz.prom"))
        except InputError:
            samples = ()
        if samples:
            ordered, _ = order_snapshots([Snapshot("a", samples, 1), Snapshot("b", samples, 1)], 5.0)
            extract_metric_facts(ordered)
            ordered, _ = order_snapshots([Snapshot("a", samples, 1), Snapshot("b", samples, 1)])
            extract_metric_facts(ordered)
        took = time.monotonic() - start
        if took > SLOW_S + SLOW_S_PER_MB * len(data) / 1e6:
            raise SlowInput(f"{len(data):,} bytes took {took:.1f} s")
    return target


def _shapes():
    """tests/hostile/shapes.py, the hostile shapes the tests assert on."""
    spec = importlib.util.spec_from_file_location("shapes", ROOT / "tests" / "hostile" / "shapes.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def seeds(max_len: int) -> list[bytes]:
    """The fixture logs and every hostile shape, each at most `max_len` bytes."""
    shapes = _shapes()
    logs = [p.read_bytes() for p in sorted((ROOT / "fixtures" / "logs").rglob("*.log"))]
    out = [data[:max_len] for data in logs]
    kv = shapes.KV.encode() + b"\n"
    out += [line.encode("utf-8", "replace")[:max_len - len(kv) - 1] + b"\n" + kv for line in shapes.SLOW_LINES.values()]
    forms = [shapes.fill(form, "fuzz")[0] for form in sorted(shapes.FORMS)]
    out.append("".join(f"(APIServer pid=1) WARNING 09-30 10:00:03 [envs.py:1] {form}\n" for form in forms).encode()
               + kv)
    out.append(b"(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {"
               + ", ".join(forms).encode() + b"}\n" + kv)
    for absurd in shapes.ABSURD:
        out.append(("\n".join(line.format(n=absurd, s=i) for i, line in enumerate(shapes.LOG_LINES)) + "\n")
                   .encode()[:max_len])
        out.append(shapes.SNAPSHOT.format(n=absurd, t="1700000000000").encode()[:max_len])
    small = logs[0][:4000]
    for pack in (gzip.compress, lzma.compress, bz2.compress):
        packed = pack(small)
        out += [packed, packed[: len(packed) * 9 // 10], packed + b"trailing garbage\n", packed + packed,
                packed[:20] + b"\x00" * 16 + packed[36:]]
    out += [small.decode("utf-8", "replace").encode("utf-16"), b"\xef\xbb\xbf" + small,
            b'{"log": ' + b"[" * 5000 + b"]" * 5000 + b"}\n" + kv]
    return [data[:max_len] for data in out]


def _mutate(data: bytes, rnd: random.Random, corpus: list[bytes]) -> bytes:
    """A few byte edits, or a splice with another seed: what hypothesis explores without coverage."""
    buf = bytearray(data)
    for _ in range(rnd.randrange(1, 8)):
        choice = rnd.random()
        at = rnd.randrange(len(buf) + 1)
        if choice < 0.4 and buf:
            buf[min(at, len(buf) - 1)] = rnd.randrange(256)
        elif choice < 0.6:
            buf[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 16)))
        elif choice < 0.8:
            del buf[at:at + rnd.randrange(1, 64)]
        else:
            other = rnd.choice(corpus)
            piece = rnd.randrange(len(other) + 1)
            buf[at:at] = other[piece:piece + rnd.randrange(1, 512)]
    return bytes(buf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--crashes", default=str(ROOT / "bench" / "out" / "crashes"))
    parser.add_argument("--max-len", type=int, default=65536, help="largest input tried, in bytes")
    args = parser.parse_args()
    Path(args.crashes).mkdir(parents=True, exist_ok=True)
    corpus = seeds(args.max_len)
    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is not None:
        with atheris.instrument_imports():
            target = make_target()
        folder = Path(args.crashes).parent / "fuzz-corpus"
        folder.mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(corpus):
            (folder / f"seed-{i}").write_bytes(data)
        atheris.Setup([sys.argv[0], f"-max_total_time={args.seconds}", f"-artifact_prefix={args.crashes}/",
                       f"-max_len={args.max_len}", "-timeout=120", str(folder)], target)
        atheris.Fuzz()
    else:
        from hypothesis import given, settings
        from hypothesis import strategies as st
        target = make_target()
        deadline = time.monotonic() + args.seconds
        for data in corpus:
            target(data)

        @settings(max_examples=10**9, deadline=None, database=None)
        @given(st.one_of(st.binary(max_size=4000), st.sampled_from(corpus),
                         st.builds(lambda d, r: _mutate(d, r, corpus), st.sampled_from(corpus), st.randoms())))
        def run(data: bytes) -> None:
            if time.monotonic() > deadline:
                raise TimeoutError
            try:
                target(data)
            except BaseException:
                crash = Path(args.crashes) / f"crash-{abs(hash(data)):x}"
                crash.write_bytes(data)
                print(f"crashing input written to {crash}", file=sys.stderr)
                raise
        try:
            run()
        except TimeoutError:
            print(f"fuzzed for {args.seconds} s: no failure")


if __name__ == "__main__":
    main()
