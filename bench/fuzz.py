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

`--inputs N` runs a campaign instead, through the command line as a user runs it: N fuzzed inputs, in
turn a log, a /metrics file, a --model-config config.json, a Prometheus query_range answer (served by
a local http.server) and a .vtriage.toml, each run in-process (click's CliRunner) and every
`--subprocess-every`-th also as `python -m triage`. It counts internal errors (an exception that is
not an input error, "internal error" or a traceback on stderr, an exit code other than 0-3), hangs (a
run longer than --hang-seconds) and planted secrets (tokens put in each input, its --header and its
URL) found in any output; each finding's input is written to --crashes.

usage: python bench/fuzz.py --inputs 20000 [--seed 1] [--subprocess-every 200] [--hang-seconds 30]
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import http.server
import importlib.util
import json
import lzma
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
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


# --- the campaign: every input kind through the command line ----------------------------------------------

KINDS = ("log", "metrics", "model-config", "prometheus", "config")
FORMATS = ("text", "json", "markdown", "html")
HEADER_SECRET = "Bearer hdrQ7s3cr3tZ9x8c7v6b5n4m3"
URL_SECRET = "urlQ7pa55w0rdZ9x8c7v6"
PROM_ANSWER = {"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"__name__": "vllm:num_requests_running", "pod": "vllm-0", "model_name": "m"},
     "values": [[1700000000, "3"], [1700000015, "4"]]},
    {"metric": {"__name__": "vllm:kv_cache_usage_perc", "pod": "vllm-0", "model_name": "m"},
     "values": [[1700000000, "0.97"], [1700000015, "0.99"]]},
    {"metric": {"__name__": "vllm:num_preemptions_total", "pod": "vllm-0", "model_name": "m"},
     "values": [[1700000000, "10"], [1700000015, "40"]]}]}}
CONFIG_SEED = ('runbook_url = "https://wiki.example.com/vllm/{verdict}"\n\n[[ignore]]\nrule = "preemption-observed"\n'
               'reason = "nightly batch"\nexpires = 2999-12-31\n')


def _absurd(rnd: random.Random):
    """A JSON value a config or an API should never hold."""
    return rnd.choice([10**400, 10**18, 2 * 10**9, 10**8, -1, 0, 1e308, -1e308, float("nan"), float("inf"), 0.5,
                       True, None, "", "4", "x" * 1000, [], [1, 2], {}, {"a": {"b": [None]}}, [[1]] * 50,
                       int("9" * 4000)])


def _mutate_json(value, rnd: random.Random, depth: int = 0):
    """The value with one random part replaced by an absurd one, a key dropped, or a list cut."""
    if isinstance(value, dict) and value and depth < 6:
        key = rnd.choice(list(value))
        out = dict(value)
        roll = rnd.random()
        if roll < 0.15:
            del out[key]
        elif roll < 0.5:
            out[key] = _absurd(rnd)
        else:
            out[key] = _mutate_json(value[key], rnd, depth + 1)
        return out
    if isinstance(value, list) and value and depth < 6:
        out = list(value)
        i = rnd.randrange(len(out))
        roll = rnd.random()
        if roll < 0.2:
            del out[i]
        elif roll < 0.5:
            out[i] = _absurd(rnd)
        else:
            out[i] = _mutate_json(out[i], rnd, depth + 1)
        return out
    return _absurd(rnd)


def _absurd_figures(answer: dict, rnd: random.Random) -> dict:
    """A well-formed answer whose times and values are absurd: the shape holds, the figures do not."""
    shapes = _shapes()
    out = json.loads(json.dumps(answer))
    for series in out["data"]["result"]:
        for pair in series["values"]:
            if rnd.random() < 0.5:
                pair[1] = rnd.choice(shapes.ABSURD)
            if rnd.random() < 0.2:
                pair[0] = rnd.choice([0, -1, 1e300, 1.5e11, 1700000000.123456])
    return out


_TOML_VALUES = ['"x"', "1" + "0" * 400, "-1", "1e400", "nan", "inf", "true", "[]", "[[]]", "{}", "2999-12-31",
                "0001-01-01", "1979-05-27T07:32:00Z", '"' + "a" * 5000 + '"', '"{verdict}"', '"hf_Q7abcdefghijkLMNOP"',
                '"https://wiki/{verdict}/{verdict}"', '"preemption-observed"', '"oom"', '""']


def _absurd_config(rnd: random.Random) -> bytes:
    """A .vtriage.toml whose keys are the real ones and whose values are anything TOML allows."""
    def value() -> str:
        return rnd.choice(_TOML_VALUES)
    lines = [f"runbook_url = {value()}"] if rnd.random() < 0.5 else []
    for _ in range(rnd.randrange(0, 4)):
        lines += ["[[ignore]]", f"rule = {value() if rnd.random() < 0.5 else chr(34) + 'preemption-rate' + chr(34)}",
                  f"reason = {value()}"]
        if rnd.random() < 0.5:
            lines.append(f"expires = {value()}")
    return ("\n".join(lines) + "\n").encode()


def _absurd_numbers(data: bytes, rnd: random.Random) -> bytes:
    """Well-formed text with some of its figures swapped for absurd ones (1e400, NaN, -1, 5,000 digits)."""
    shapes = _shapes()
    text = data.decode("utf-8", "replace")
    return shapes.NUMBER.sub(lambda m: rnd.choice(shapes.ABSURD) if rnd.random() < 0.1 else m.group(), text).encode()


def _json_text(value, rnd: random.Random, corpus: list[bytes]) -> bytes:
    """JSON text of a mutated value, now and then mangled byte by byte too."""
    text = json.dumps(value).encode()       # NaN and Infinity as Python writes them: json.loads reads them back
    return _mutate(text, rnd, corpus) if rnd.random() < 0.25 else text


class Served:
    """A local Prometheus stand-in: answers every request with `body`, records nothing."""

    def __init__(self) -> None:
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(served.body)))
                self.end_headers()
                self.wfile.write(served.body)

        self.body = b"{}"
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]


def _planted_log(data: bytes, rnd: random.Random, i: int) -> tuple[bytes, list[str]]:
    """The log with a secret the secret matrix covers, as a whole line at a line boundary: a mutation
    cannot have broken the form, so any output that shows it is a leak."""
    shapes = _shapes()
    form = rnd.choice(sorted(shapes.FORMS))
    text, secrets = shapes.fill(form, f"campaign-{i}")
    line = f"(APIServer pid=1) WARNING 09-30 10:00:03 [envs.py:1] {text}\n".encode()
    cuts = [0] + [n + 1 for n, b in enumerate(data) if b == 0x0A]
    at = rnd.choice(cuts)
    return data[:at] + line + data[at:], secrets


def make_case(kind: str, i: int, rnd: random.Random, pools: dict, folder: Path, served: Served) -> tuple[list, list]:
    """(the command line's arguments, the secrets it must not show) for input `i`, its files written in `folder`."""
    fmt = rnd.choice(FORMATS)
    out_args = ["--format", fmt, "--force"] if kind != "model-config" else ["--format", rnd.choice(("text", "json"))]
    if kind == "log":
        chosen, roll = rnd.choice(pools["logs"]), rnd.random()
        data = _mutate(chosen, rnd, pools["logs"]) if roll < 0.6 else _absurd_numbers(chosen, rnd) if roll < 0.9 \
            else chosen
        data, secrets = _planted_log(data, rnd, i)
        path = folder / f"{i}.log"
        path.write_bytes(data)
        return [str(path), "--no-config", *out_args], secrets
    if kind == "metrics":
        path = folder / f"{i}.prom"
        chosen = rnd.choice(pools["metrics"])
        path.write_bytes(_mutate(chosen, rnd, pools["metrics"]) if rnd.random() < 0.4 else _absurd_numbers(chosen, rnd))
        return ["--metrics", str(path), "--no-config", *out_args], []
    if kind == "model-config":
        path = folder / f"{i}.json"
        path.write_bytes(_json_text(_mutate_json(rnd.choice(pools["configs"]), rnd), rnd, pools["logs"]))
        return ["check", "--model-config", str(path), "--gpu-memory-gib", "80", "--max-model-len", "4096",
                *out_args], []
    if kind == "prometheus":
        answer = _mutate_json(PROM_ANSWER, rnd) if rnd.random() < 0.5 else _absurd_figures(PROM_ANSWER, rnd)
        served.body = _json_text(answer, rnd, pools["logs"])
        (folder / f"{i}.prometheus.json").write_bytes(served.body)
        url = f"http://admin:{URL_SECRET}@127.0.0.1:{served.port}"
        return ["--prometheus", url, "--since", "5m", "--header", f"Authorization: {HEADER_SECRET}",
                "--connect-timeout", "2", "--read-timeout", "5", "--no-config", *out_args], \
            [HEADER_SECRET.split()[1], URL_SECRET]
    path = folder / f"{i}.toml"
    text = CONFIG_SEED.encode() if rnd.random() < 0.5 else _absurd_config(rnd)
    path.write_bytes(_mutate(text, rnd, pools["configs_text"]) if rnd.random() < 0.5 else text)
    return [pools["small_log"], "--config", str(path), *out_args], []


def _in_process(args: list[str]) -> tuple[int, str, str, str | None]:
    """Exit code, stdout, stderr, and the internal error (a traceback) if one escaped."""
    import click
    from click.testing import CliRunner

    from triage.cli import cli
    from triage.errors import TriageError
    result = CliRunner().invoke(cli, args, catch_exceptions=True)
    problem = None
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        if isinstance(exc, (TriageError, click.ClickException, click.exceptions.Abort)):
            return 2, result.stdout, result.stderr + f"\n{exc}", None
        problem = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else repr(exc)
    return result.exit_code, result.stdout, result.stderr, problem


def _subprocess(args: list[str], timeout: float) -> tuple[int, str, str, str | None]:
    try:
        run = subprocess.run([sys.executable, "-m", "triage", *args], capture_output=True, timeout=timeout,
                             stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"}, check=False)
    except subprocess.TimeoutExpired:
        return -1, "", "", "timeout"
    return run.returncode, run.stdout.decode("utf-8", "replace"), run.stderr.decode("utf-8", "replace"), None


def _whole_lines(data: bytes, limit: int) -> bytes:
    """At most `limit` bytes, cut after a newline: a cut line would make every input malformed."""
    return data if len(data) <= limit else data[:data.rfind(b"\n", 0, limit) + 1]


def campaign(count: int, seed: int, every: int, hang_s: float, crashes: Path, max_len: int) -> Counter:
    rnd = random.Random(seed)
    logs = [d for d in seeds(max_len) if len(d) <= max_len]
    metrics = [_whole_lines(p.read_bytes(), max_len) for p in sorted((ROOT / "fixtures" / "metrics").glob("*.prom"))]
    shapes = _shapes()
    metrics += [shapes.SNAPSHOT.format(n=n, t="1700000000000").encode() for n in shapes.ABSURD]
    configs = [json.loads(p.read_text()) for p in sorted((ROOT / "fixtures" / "configs").glob("*.json"))]
    pools = {"logs": logs, "metrics": metrics, "configs": configs,
             "configs_text": [CONFIG_SEED.encode(), *(json.dumps(c).encode() for c in configs)],
             "small_log": str(ROOT / "fixtures" / "logs" / "v1" /
                              "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")}
    served = Served()
    counts: Counter = Counter()
    crashes.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vtriage-campaign-") as tmp:
        for i in range(count):
            kind = KINDS[i % len(KINDS)]
            folder = Path(tmp) / str(i)
            folder.mkdir()
            args, secrets = make_case(kind, i, rnd, pools, folder, served)
            runs = [("in-process", _in_process)]
            if every and i % every == 0:
                runs.append(("subprocess", lambda a: _subprocess(a, hang_s * 2)))
            for how, runner in runs:
                t0 = time.monotonic()
                code, out, err, problem = runner(args)
                took = time.monotonic() - t0
                counts[f"{kind} {how}"] += 1
                counts[f"{kind} exit {code}"] += 1
                findings = []
                if problem == "timeout" or took > hang_s:
                    findings.append(f"hang: {took:.1f} s")
                elif problem:
                    findings.append("internal error")
                if code not in (0, 1, 2, 3) and problem != "timeout":
                    findings.append(f"exit code {code}")
                if "Traceback" in err or "internal error" in err:
                    findings.append("internal error on stderr")
                leaked = [s for s in secrets if s in out or s in err]
                if leaked:
                    findings.append(f"secret shown: {leaked[0][:6]}...")
                for finding in findings:
                    counts[finding.split(":")[0]] += 1
                    saved = crashes / f"{kind}-{i}"
                    saved.mkdir(parents=True, exist_ok=True)
                    for f in folder.iterdir():
                        (saved / f.name).write_bytes(f.read_bytes())
                    (saved / "finding.txt").write_text(f"{finding}\n{how}: vtriage {' '.join(args)}\nexit {code}\n"
                                                       f"--- stderr\n{err[-4000:]}\n--- problem\n{problem or ''}\n")
                    print(f"[{i}] {kind} {how}: {finding} (kept in {saved})", file=sys.stderr)
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
            if (i + 1) % 500 == 0:
                print(f"{i + 1:,} inputs in {time.monotonic() - started:.0f} s: {dict(counts)}", file=sys.stderr)
    served.httpd.shutdown()
    counts["seconds"] = round(time.monotonic() - started)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--crashes", default=str(ROOT / "bench" / "out" / "crashes"))
    parser.add_argument("--max-len", type=int, default=65536, help="largest input tried, in bytes")
    parser.add_argument("--inputs", type=int, help="run a campaign of this many inputs across every input kind")
    parser.add_argument("--seed", type=int, default=1, help="the campaign's random seed")
    parser.add_argument("--subprocess-every", type=int, default=200, help="run every Nth input as a subprocess too")
    parser.add_argument("--hang-seconds", type=float, default=30.0, help="a run longer than this is a hang")
    args = parser.parse_args()
    Path(args.crashes).mkdir(parents=True, exist_ok=True)
    if args.inputs:
        counts = campaign(args.inputs, args.seed, args.subprocess_every, args.hang_seconds, Path(args.crashes),
                          args.max_len)
        print(json.dumps(dict(sorted(counts.items())), indent=1))
        found = sum(counts[k] for k in ("hang", "internal error", "internal error on stderr", "exit code",
                                        "secret shown"))
        sys.exit(1 if found else 0)
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
