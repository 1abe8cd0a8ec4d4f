"""The command line: the only module that knows about click, the terminal and exit codes.

Exit codes: 0 healthy, 1 a problem diagnosed, 2 usage or input error, 3 inconclusive or no vLLM output;
with --fail-on, 1 when the verdict matches, 3 when the input is empty or holds no vLLM output (unless
--allow-empty), and 0 otherwise. `vtriage gpu` adds 4: no GPU, driver or NVML here.
"""
from __future__ import annotations

import dataclasses
import errno
import math
import os
import re
import stat
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import click

from . import __version__
from .decide.gate import gate, unjudgeable_input
from .decide.ruleset import load_rules
from .decide.suppress import (
    Config,
    distrust,
    distrust_warning,
    effective_uid,
    expiry_warnings,
    find_config,
    load_config,
    with_ignored,
)
from .errors import InputError, NotEnoughInput, TriageError
from .facts.registry import FACTS
from .logs.signatures import MATCH_TIMEOUT_S, load_signatures
from .logs.timewindow import utc_now
from .pipeline import Incident, Toolkit, build_report
from .redact import Redactor
from .render import RENDERERS
from .render.common import neutral
from .sources.files import open_log, read_model_config, read_small_text
from .sources.waiting import open_fifo
from .vocabulary import CONFIG_NAME, MAX_METRICS_BYTES, VERDICTS

# What only a subcommand or an option needs is imported where it is used: a log's report must not wait for
# HTTP, templates, the capacity model, GPU probing or the self-test (see docs/performance.md, start-up).
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .capacity.registry import UserFigures
    from .gpu.probe import GpuSnapshot
    from .metrics.httpget import HttpOptions
    from .metrics.inputs import MetricsRead
    from .model import Fact, Report

DEFAULT_MAX_BYTES = f"{MAX_METRICS_BYTES >> 20}MiB"

EXIT_HEALTHY, EXIT_PROBLEM, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3


def exit_code_for(verdict: str) -> int:
    if verdict == "healthy":
        return EXIT_HEALTHY
    if verdict == "inconclusive":
        return EXIT_INCONCLUSIVE
    return EXIT_PROBLEM


def load_toolkit(rules_dir: str | None, compile_now: bool | None = None) -> Toolkit:
    """The rules and signatures (`compile_now`: see load_signatures; `vtriage rules` checks every regex)."""
    directory = Path(rules_dir) if rules_dir else None
    return Toolkit(rules=load_rules(directory),
                   signatures=load_signatures(directory / "signatures" if directory else None, compile_now))


def load_team_config(kit: Toolkit, config_path: str | None, no_config: bool,
                     ignore: Sequence[str]) -> tuple[Toolkit, Config]:
    """The toolkit with the suppressions and runbook URL of .vtriage.toml (found, or --config) and --ignore."""
    if config_path and no_config:
        raise click.UsageError("--config and --no-config contradict each other; give one")
    path: Path | None = None
    warnings: tuple[str, ...] = ()
    if config_path:
        path = Path(config_path)
        if not path.is_file():
            raise InputError(config_path, "no such config file",
                             f"create it, or drop --config to use {CONFIG_NAME} from this folder or the git root")
        why = distrust(path, effective_uid())
        warnings = (distrust_warning(path, why, skipped=False),) if why else ()
    elif not no_config:
        path, warnings = find_config(Path.cwd(), os.environ, Path.home())
    for warning in warnings:
        tell(f"vtriage: warning: {warning}")
    config = load_config(path, kit.rules, date.today()) if path else Config(None)
    config = with_ignored(config, ignore, kit.rules)
    return dataclasses.replace(kit, suppressions=config.suppressions, runbook_url=config.runbook_url,
                               config_path=config.path), config


def _config_options(fn):
    """--config, --no-config and --ignore, shared by the commands that diagnose."""
    fn = click.option("--ignore", "ignore", multiple=True, metavar="RULE",
                      help="Suppress RULE (a rule id from `vtriage rules`): listed as SUPPRESSED, never decides.")(fn)
    fn = click.option("--no-config", is_flag=True, help=f"Do not read {CONFIG_NAME}.")(fn)
    fn = click.option("--config", "config_path", metavar="PATH",
                      help=f"Read suppressions from PATH instead of {CONFIG_NAME} (in this folder, else at the "
                           "git root, else ~/.config/vtriage/config.toml).")(fn)
    return fn


# -o names an open file descriptor: written to as it is (/dev/stdout into a pipe cannot be renamed over).
_DESCRIPTOR_NAMES = re.compile(r"/dev/(?:(stdout)|(stderr)|fd/(\d+))|/proc/self/fd/(\d+)")

# What -o does with the path it names.
_REPLACE = "replace"          # a regular file, or nothing yet: a temporary file beside it, renamed onto it
_STRAIGHT = "straight"        # a FIFO or character device: opened and written to, as the shell's > would
_DESCRIPTOR = "descriptor"    # an open file descriptor of this process (stdout, /dev/fd/N): written to


def _output_plan(path: str, inputs: Sequence[str]) -> tuple[str, int | None]:
    """How -o PATH is written, and the descriptor for _DESCRIPTOR; refuses (InputError) what -o must not write.

    vtriage runs as root in shared folders: a symbolic link at PATH is refused, never followed (a planted
    /tmp/report.txt -> /etc/passwd), and so is anything but a regular file, FIFO or character device, and a
    file that is one of the inputs, stdin included (`vtriage -o x.log < x.log`)."""
    named = _DESCRIPTOR_NAMES.fullmatch(path)
    try:
        if named:
            descriptor = 1 if named[1] else 2 if named[2] else int(named[3] or named[4])
            try:
                st = os.fstat(descriptor)
            except OSError:
                raise InputError(path, "is not an open file descriptor of vtriage",
                                 "give a file path, or redirect the shell's output instead") from None
        else:
            descriptor = None
            st = os.lstat(path)
    except FileNotFoundError:
        return _REPLACE, None
    except OSError as exc:
        raise _write_error(path, exc) from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(path, "is a symbolic link; vtriage never writes through one",
                         "remove the link, or give the path of the file itself")
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, "is a directory", f"name a file in it, e.g. -o {Path(path) / 'report.txt'}")
    if stat.S_ISREG(st.st_mode):
        clash = _input_at(st, inputs)
        if clash:
            raise InputError(path, f"is {clash}; refusing to overwrite it", "choose another -o path")
    if descriptor is None and _same_file(st, 1):
        descriptor = 1              # `-o r.json >> r.json`: one report, where stdout already points
    if descriptor is not None:
        return _DESCRIPTOR, descriptor
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
        return _STRAIGHT, None
    if not stat.S_ISREG(st.st_mode):
        kind = "a socket" if stat.S_ISSOCK(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode) else \
            "not a regular file"
        raise InputError(path, f"is {kind}; -o writes only a regular file (or a FIFO or terminal)",
                         "give the path of a report file")
    return _REPLACE, None


def _input_at(output: os.stat_result, inputs: Sequence[str]) -> str:
    """Which input (as the error names it) is the file `output`, or "" when none is."""
    for given in inputs:
        if given == "-":
            if _same_file(output, 0):
                return "the file read on stdin"
            continue
        try:
            st = os.stat(given)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (output.st_dev, output.st_ino):
            return "one of the inputs"
    return ""


def _same_file(st: os.stat_result, descriptor: int) -> bool:
    try:
        other = os.fstat(descriptor)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)


def write_atomically(path: str, text: str, inputs: Sequence[str]) -> None:
    """Write `text` to -o `path`, as _output_plan says; never over an input, never through a symbolic link.

    A regular file (or a new one) is written to a temporary file made beside it with exclusive creation, then
    renamed onto the path named (rename replaces a link put there since, never its target), so a reader never
    sees half a report. A FIFO or character device, /dev/stdout or /dev/fd/N is written straight to: a rename
    would put a regular file in its place. Every OS error is one line, never a traceback.
    """
    plan, descriptor = _output_plan(path, inputs)
    data = text.encode("utf-8")
    try:
        if plan == _DESCRIPTOR:
            assert descriptor is not None
            if descriptor == 1:
                sys.stdout.flush()
            _write_all(descriptor, data)
            return
        if plan == _STRAIGHT:
            _write_straight(path, data)
            return
        directory = os.path.dirname(path) or "."
        if not os.path.isdir(directory):
            raise InputError(path, f"directory {directory} does not exist", "create it first")
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _write_error(path, exc) from None
    try:
        try:
            # mkstemp makes the file private; a report is meant to be shared like any file the user writes.
            umask = os.umask(0)
            os.umask(umask)
            try:
                st = os.lstat(path)
                mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o666 & ~umask
            except FileNotFoundError:
                mode = 0o666 & ~umask
            os.fchmod(fd, mode)
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise _write_error(path, exc) from None
        raise


def _write_straight(path: str, data: bytes) -> None:
    """Write to the FIFO or character device at `path` (checked again once open: it may have been swapped)."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY
    fd = open_fifo(path, flags, tell) if stat.S_ISFIFO(os.lstat(path).st_mode) else os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
            raise InputError(path, "changed while being opened; refusing to write it", "run vtriage again")
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


EXTENSION_FORMATS = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown",
                     ".json": "json", ".txt": "text", ".text": "text"}
_A_FILE = {"html": "an HTML file", "markdown": "a Markdown file", "json": "a JSON file", "text": "a text file"}


def output_format(ctx: click.Context, fmt: str, output: str | None, formats: Sequence[str]) -> str:
    """The format to write: the one -o's extension names (report.html is HTML), else --format.
    An explicit --format that disagrees with the extension is a usage error, not a silent choice."""
    inferred = EXTENSION_FORMATS.get(Path(output).suffix.lower()) if output else None
    if inferred is None:
        return fmt
    if ctx.get_parameter_source("fmt") in (click.core.ParameterSource.COMMANDLINE,
                                           click.core.ParameterSource.ENVIRONMENT) and fmt != inferred:
        raise click.UsageError(f"--format {fmt} contradicts -o {output}, which names {_A_FILE[inferred]}; drop one")
    if inferred not in formats:
        raise click.UsageError(f"-o {output} names {_A_FILE[inferred]}, but this command writes "
                               f"{' or '.join(formats)}")
    return inferred


def check_output(path: str | None, inputs: Sequence[str]) -> None:
    """Refuse an -o that cannot or must not be written (see _output_plan) before reading any input: one line,
    not an error at the end."""
    if not path or _output_plan(path, inputs)[0] != _REPLACE:
        return
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise click.UsageError(f"-o {path}: directory {directory} does not exist; create it first")
    try:     # the one sure test, for root and read-only file systems alike: make a file there
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        said = (exc.strerror or str(exc)).lower()
        hint = _WRITE_HINTS.get(exc.errno or 0)
        raise click.UsageError(f"-o {path}: cannot write in {directory}: {said}"
                               + (f" ({hint})" if hint else "")) from None


def stdin_is_piped() -> bool:
    """stdin is a pipe or a redirected file (`kubectl logs POD | vtriage`), not a terminal or /dev/null."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


_WRITE_HINTS = {
    errno.EACCES: "choose a directory you can write to",
    errno.EPERM: "choose a directory you can write to",
    errno.EROFS: "the file system is read-only: write the report somewhere else",
    errno.ENOSPC: "free some space, or write the report somewhere else",
    errno.EDQUOT: "free some space, or write the report somewhere else",
    errno.EISDIR: "give a file name, e.g. -o report.txt",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.ENAMETOOLONG: "choose a shorter file name",
}


def _write_error(where: str, exc: OSError) -> InputError:
    """An OS error while writing output, as one line: where, what the system said, what to try."""
    what = f"cannot write: {(exc.strerror or str(exc)).lower()}"
    return InputError(where, what, _WRITE_HINTS.get(exc.errno or 0, ""))


def tell(message: str, before: str = "", after: str = "\n") -> None:
    """The one writer of stderr (errors, warnings, progress). What the message quotes came from input (a file name,
    a bad /metrics line, an HTTP reason phrase), so its secrets are masked (always: --no-redact is about the
    report) and its control and bidirectional characters shown as escapes, as the reports show them; `before` and
    `after` are vtriage's own terminal controls, written as they are."""
    sys.stderr.write(before + neutral(Redactor().redact_mapped(message, prose=True)[0]) + after)
    sys.stderr.flush()


def _use_color(fmt: str, output: str | None) -> bool:
    if fmt != "text" or output or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


class _DefaultToDiagnose(click.Group):
    """`vtriage FILE...` runs the diagnosis; named subcommands do the rest."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = ["diagnose", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultToDiagnose, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vtriage")
def cli() -> None:
    """Triage a vLLM out-of-memory or preemption incident from its log and metrics.

    \b
      vtriage server.log                      diagnose a log (several files = one incident)
      kubectl logs POD --previous | vtriage   read stdin (or name it: -)
      vtriage --format json server.log        machine-readable report
      vtriage -o report.html server.log       one self-contained page for the ticket (-o names the format)
      vtriage server.log --metrics m1.prom --metrics m2.prom      log joined with saved /metrics
      vtriage --metrics-url http://localhost:8000/metrics         scrape a live server 3 times
      vtriage --prometheus http://prom:9090 --selector '{pod=~"vllm-.*"}' --since 1h   a fleet
    """


def _http_options(headers: Sequence[str], ca_cert: str | None, insecure: bool, connect_timeout: float,
                  read_timeout: float, max_bytes: int, api_key: bool) -> HttpOptions:
    """Headers from --header, plus vLLM's own convention: VLLM_API_KEY as a bearer token."""
    from .metrics.httpget import HttpOptions, parse_header
    parsed = dict(parse_header(h) for h in headers)
    key = os.environ.get("VLLM_API_KEY")
    if api_key and key and not any(name.lower() == "authorization" for name in parsed):
        parsed["Authorization"] = f"Bearer {key}"
    return HttpOptions(headers=parsed, verify=False if insecure else (ca_cert or True),
                       connect_timeout=connect_timeout, read_timeout=read_timeout, max_bytes=max_bytes)


def _countdown():
    """A one-line countdown on stderr while scraping, only on a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(taken: int, count: int, left: float) -> None:
        text = f"vtriage: scraped {taken} of {count}" + (f", next in {left:.0f} s" if left > 0 else "")
        tell(text.ljust(48), before="\r", after="\r" + " " * 48 + "\r" if taken == count else "")
    return show


def _read_metrics(ctx: click.Context, options: Mapping[str, Any], redaction: Redactor) -> MetricsRead | None:
    """The one metrics source the command line names: saved files, live URLs, or Prometheus. `redaction`: what
    the report will mask (the lines it could touch are kept whole: metrics/thinning.py)."""
    sources = [flag for flag, key in (("--metrics", "metrics_files"), ("--metrics-url", "metrics_urls"),
                                      ("--prometheus", "prometheus_url")) if options[key]]
    if len(sources) > 1:
        raise click.UsageError(f"{' and '.join(sources)} are different sources of metrics; give one")
    if not options["prometheus_url"]:
        for flag in ("selector", "job", "instance", "at", "step"):
            if options[flag]:
                raise click.UsageError(f"--{flag} selects series in Prometheus: it needs --prometheus URL")
    if options["insecure"] and options["ca_cert"]:
        raise click.UsageError("--insecure and --ca-cert contradict each other; give one")
    interval_given = ctx.get_parameter_source("interval") == click.core.ParameterSource.COMMANDLINE
    if not sources:
        return None
    from .metrics.inputs import read_files, read_prometheus, read_urls
    # The redaction whose lines thinning keeps whole; None: no thinning (a time window cuts samples by their time)
    thinning_redactor = None if options["since"] or options["until"] else redaction
    if options["metrics_files"]:
        return read_files(options["metrics_files"], options["interval"] if interval_given else None, thinning_redactor)
    web = (options["headers"], options["ca_cert"], options["insecure"], options["connect_timeout"],
           options["read_timeout"], options["max_bytes"])
    if options["metrics_urls"]:
        return read_urls(options["metrics_urls"], options["samples"], options["interval"],
                         _http_options(*web, api_key=True), _countdown(), thinning_redactor)
    if options["prometheus_url"]:
        return read_prometheus(options["prometheus_url"], options["selector"], options["job"], options["instance"],
                               options["since"], options["until"], options["at"], options["step"],
                               _http_options(*web, api_key=False))
    return None


class _Finite(click.FloatRange):
    """A finite number of `unit` within the bounds (click's range lets NaN and infinity through)."""

    def __init__(self, unit: str, **bounds: Any) -> None:
        super().__init__(**bounds)
        self.unit = unit

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a number of {self.unit}", param, ctx)
        return number


_SECONDS = _Finite("seconds", min=0, min_open=True, max=86400)
_GIB = _Finite("GiB", min=1, max=1e5)          # no GPU has more; beyond it is a typo


class _Size(click.ParamType):
    """A byte count: 1048576, 512KiB, 64MiB, 1G (binary units; B, K, M, G with or without iB)."""

    name = "size"
    _UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        if isinstance(value, int):
            return value
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmg]?)(?:i?b)?\s*", str(value), re.I)
        if not m or float(m[1]) * self._UNITS[m[2].lower()] < 1:
            self.fail(f"{value!r} is not a size, e.g. 64MiB, 512KiB, 1G", param, ctx)
        return int(float(m[1]) * self._UNITS[m[2].lower()])


_SIZE = _Size()


def _gpu_options(fn):
    """--gpu, --gpu-memory-gib and --gpus, shared by the commands whose capacity model sizes fixes or predictions
    with the GPU (`_user_figures` turns them into what the model takes)."""
    fn = click.option("--gpus", type=click.IntRange(1, 100_000), metavar="N",
                      help="GPUs the node has: tensor-parallel fixes and suggestions stay within them.")(fn)
    fn = click.option("--gpu-memory-gib", type=_GIB, metavar="GIB",
                      help="One GPU's memory, when the log does not print it (79.19 for an H100 as torch reports "
                           "it); instead of --gpu.")(fn)
    fn = click.option("--gpu", "gpu_name", metavar="NAME",
                      help="The GPU, when the log does not print its memory: L4, A10G, L40S, A100-40, A100-80, H100, "
                           "H100-NVL, H200, MI300X, RTX-3090, RTX-4090.")(fn)
    return fn


@cli.command()
@click.argument("files", nargs=-1, metavar="FILE...")
@click.option("--format", "fmt", type=click.Choice(sorted(RENDERERS), case_sensitive=False), default="text",
              show_default=True, help="Output format (default: the one -o's extension names, else text).")
@click.option("-o", "--output", metavar="PATH",
              help="Write the report to PATH (atomically) instead of stdout; .html, .md, .json or "
                   ".txt picks the format.")
@click.option("--force", is_flag=True, help="Print HTML on a terminal anyway (it asks for -o otherwise).")
@click.option("--rules", "rules_dir", metavar="DIR",
              help="Use the rules and signatures in DIR instead of the bundled ones.")
@click.option("--metrics", "metrics_files", multiple=True, metavar="FILE",
              help="A saved /metrics snapshot (curl .../metrics > m.prom); repeat for several, oldest first "
                   "(snapshots with timestamps, e.g. from /federate, are put in order by them).")
@click.option("--metrics-url", "metrics_urls", multiple=True, metavar="URL",
              help="Scrape a live vLLM /metrics endpoint (repeat to add its GPU's dcgm-exporter).")
@click.option("--samples", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Scrapes of --metrics-url (two or more give rates).")
@click.option("--interval", type=_SECONDS, default=5.0, metavar="SECONDS",
              help="Seconds between scrapes of --metrics-url (default 5). With --metrics files: the seconds between "
                   "the snapshots when neither their timestamps nor the files' times say (no default there).")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="HTTP header for --metrics-url/--prometheus, e.g. 'Authorization: Bearer TOKEN' "
                   "(--metrics-url also sends VLLM_API_KEY as a bearer token).")
@click.option("--ca-cert", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="CA bundle to verify an https:// server with.")
@click.option("--insecure", is_flag=True, help="Do not verify the https:// server's certificate.")
@click.option("--connect-timeout", type=_SECONDS, default=5.0, show_default=True, metavar="SECONDS",
              help="Give up connecting to --metrics-url/--prometheus after this long.")
@click.option("--read-timeout", type=_SECONDS, default=30.0, show_default=True, metavar="SECONDS",
              help="Give up when the whole answer (headers and body) has not arrived after this long.")
@click.option("--max-bytes", type=_SIZE, default=DEFAULT_MAX_BYTES, show_default=True, metavar="SIZE",
              help="Read at most this much of an answer, after decompression (e.g. 256MiB; a big "
                   "/metrics is a few MiB).")
@click.option("--prometheus", "prometheus_url", metavar="URL",
              help="Read the vLLM series from a Prometheus server (query_range); one line per instance.")
@click.option("--selector", metavar="'{LABEL=\"VALUE\",...}'",
              help="PromQL label matchers for --prometheus, e.g. '{namespace=\"llm\",pod=~\"vllm-.*\"}'.")
@click.option("--job", metavar="JOB", help="Shorthand for a job=\"JOB\" matcher.")
@click.option("--instance", metavar="INSTANCE", help="Shorthand for an instance=\"INSTANCE\" matcher.")
@click.option("--since", metavar="TIME|DURATION",
              help="Start of the window: a time (2026-11-30T10:00, '11-30 10:00', 10:00) or a "
                   "duration (1h, 30m) before "
                   "--until, else before the end of the log (with --prometheus: before now; default 1h there).")
@click.option("--until", metavar="TIME|DURATION",
              help="End of the window: a time, or a duration before the end of the log (with --prometheus: now).")
@click.option("--at", metavar="TIME", help="One instant instead of a window, like a single /metrics snapshot then.")
@click.option("--step", metavar="DURATION", help="Query resolution (default: the window / 240, at least 1 s).")
@click.option("--no-redact", is_flag=True, help="Show secrets (API keys, tokens) in the report instead of ***.")
@click.option("--redact-prompts", is_flag=True, help="Also mask prompt and completion text in evidence lines.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="VERDICT|SEVERITY",
              help="Exit 1 when the verdict is one of these (or a severity at least this bad: ok, info, warning, "
                   "critical), else 0; comma-separated or repeated. For CI and runbook gates. An empty input or "
                   "one with no vLLM output exits 3, never 0 (see --allow-empty).")
@click.option("--allow-empty", is_flag=True,
              help="With --fail-on: judge an empty input, or one with no vLLM output, by the policy (inconclusive) "
                   "instead of exiting 3.")
@click.option("-q", "--quiet", is_flag=True,
              help="Print nothing on stdout: the exit code is the answer (-o still writes).")
@_config_options
@click.option("--gpu-snapshot", metavar="FILE",
              help="GPU memory and processes as external-pressure evidence: `vtriage gpu --format json` output, "
                   "or pasted nvidia-smi text / --query-compute-apps CSV.")
@click.option("--probe-gpu", is_flag=True, help="Ask this node's GPUs (NVML) for the same evidence, now.")
@click.option("--vllm-pid", "vllm_pids", multiple=True, type=int, metavar="PID",
              help="The vLLM server's process (repeat); with it, every other GPU process counts as external.")
@_gpu_options
@click.option("--model-config", metavar="CONFIG",
              help="The model's local config.json (or its folder): exact parameters, KV bytes per token, heads.")
@click.pass_context
def diagnose(ctx: click.Context, files: tuple[str, ...], fmt: str, output: str | None, force: bool,
             rules_dir: str | None, no_redact: bool, redact_prompts: bool, fail_on: tuple[str, ...],
             allow_empty: bool, quiet: bool,
             config_path: str | None, no_config: bool, ignore: tuple[str, ...], gpu_snapshot: str | None,
             probe_gpu: bool, vllm_pids: tuple[int, ...], gpu_name: str | None, gpu_memory_gib: float | None,
             gpus: int | None, model_config: str | None, **metric_options) -> None:
    """Diagnose FILE... (- or a pipe with no FILE: stdin). Several files are read as one incident; metrics join them.

    What the log lacks can be given: --gpu NAME or --gpu-memory-gib, --gpus, --model-config."""
    metrics_files = metric_options["metrics_files"]
    fmt = output_format(ctx, fmt.lower(), output, sorted(RENDERERS))
    metrics_given = any(metric_options[k] for k in ("metrics_files", "metrics_urls", "prometheus_url"))
    if not files and not metrics_given and stdin_is_piped():
        files = ("-",)
    if not files and not metrics_given:
        raise click.UsageError("no input: give a log file, or pipe one in (kubectl logs POD --previous | vtriage)")
    if fmt == "html" and not output and not quiet and not force and sys.stdout.isatty():
        raise click.UsageError("HTML is a page, not terminal text: write it with -o report.html "
                               "(or --force to print it here)")
    read = files + metrics_files + tuple(p for p in (gpu_snapshot, model_config) if p)
    check_output(output, read)
    if (files + metrics_files).count("-") > 1:
        raise click.UsageError("stdin (-) can be given only once")
    if gpu_snapshot and probe_gpu:
        raise click.UsageError("--gpu-snapshot and --probe-gpu are two sources of the same evidence; give one")
    if vllm_pids and not (gpu_snapshot or probe_gpu):
        raise click.UsageError("--vllm-pid says which GPU process is vLLM: it needs --gpu-snapshot or --probe-gpu")
    if allow_empty and not fail_on:
        raise click.UsageError("--allow-empty says how --fail-on treats an empty input: it needs --fail-on")
    figures = _user_figures(gpu_name, gpu_memory_gib, gpus, model_config)
    kit, config = load_team_config(load_toolkit(rules_dir), config_path, no_config, ignore)
    failing = gate(fail_on, kit.rules.classes) if fail_on else None
    inputs = [open_log(path, tell) for path in files]
    snapshot = _gpu_snapshot(gpu_snapshot, probe_gpu, vllm_pids)
    metrics = _read_metrics(ctx, metric_options, Redactor(enabled=not no_redact, prompts=redact_prompts))
    since, until = metric_options["since"], metric_options["until"]
    window = None
    if (since or until) and not metric_options["prometheus_url"]:
        window = (since, until, utc_now())
    incident = Incident(logs=tuple(inputs), metrics=metrics, gpu=snapshot, window=window, user_figures=figures,
                        redact=not no_redact, redact_prompts=redact_prompts,
                        warnings=expiry_warnings(config) if config.expired else ())
    progress = [ProgressLine(inp.name, None if inp.compression else inp.size)   # bytes read are decompressed ones
                for inp in inputs] if sys.stderr.isatty() and not quiet else []
    try:
        report = build_report(incident, kit, progress)
    finally:
        for line in progress:
            line.close()
    for skipped in (warning for summary in report.inputs for warning in summary.skipped):
        tell(f"vtriage: warning: {skipped}")     # damage to the input is said where it is read too
    text = RENDERERS[fmt](report, color=_use_color(fmt, output))
    if output:
        write_atomically(output, text, read)
    elif not quiet:
        click.echo(text, nl=False)
    verdict = report.diagnosis.verdict
    if failing is not None:
        if failing.fails(report):
            sys.exit(EXIT_PROBLEM)
        unjudgeable = None if allow_empty else unjudgeable_input(report)
        if unjudgeable:
            tell(f"vtriage: --fail-on: {unjudgeable}, so the gate cannot pass: exit 3 "
                 "(--allow-empty judges such input by the policy)")
            sys.exit(EXIT_INCONCLUSIVE)
        sys.exit(EXIT_HEALTHY)
    sys.exit(exit_code_for(verdict))


@cli.command("rules")
@click.option("--rules", "rules_dir", metavar="DIR", help="Check the rules in DIR instead of the bundled ones.")
@click.option("--facts", "show", flag_value="facts", help="List the facts rules may use (Markdown).")
@click.option("--fixes", "show", flag_value="fixes", help="List the fix solvers rules may name.")
@click.option("--phases", "show", flag_value="phases",
              help="List vLLM's functions and the phase each places a traceback in (Markdown, docs/phases.md).")
@click.option("--tree", "show", flag_value="tree", default=True, help="Show the decision tree (default).")
@click.option("--test", "run_tests", is_flag=True,
              help="Run every rule's examples and every signature's samples; exit 1 if one fails.")
def rules_command(rules_dir: str | None, show: str, run_tests: bool) -> None:
    """Validate the rules and signatures, and show the tree, the facts or the fixes, or (--test) run
    their examples and samples.

    Exit codes (--test): 0 every example and sample behaves as its file says, 1 one does not,
    2 usage or input error (a rule file that does not load)."""
    kit = load_toolkit(rules_dir, compile_now=True)
    if run_tests:
        from .ruletests import run_rule_tests
        outcome = run_rule_tests(kit, kit.rules.directory)
        for failure in outcome.failures:
            click.echo(f"FAIL {failure.line()}")
        click.echo(outcome.summary())
        sys.exit(0 if outcome.passed else 1)
    if show == "facts":
        click.echo(facts_markdown(), nl=False)
    elif show == "phases":
        from .logs.phases import phases_markdown
        click.echo(phases_markdown(kit.signatures.functions), nl=False)
    elif show == "fixes":
        from .capacity.fixes import FIXES
        for name, solver in sorted(FIXES.items()):
            click.echo(f"{name}: {(solver.__doc__ or '').strip()}")
    else:
        def walk(nodes, depth):
            for node in nodes:
                verdict = f"  -> {node.verdict} ({node.confidence})" if node.verdict else ""
                click.echo(f"{'  ' * depth}{node.id}: {node.title}{verdict}")
                walk(kit.rules.children.get(node.id, ()), depth + 1)
        walk(kit.rules.roots, 0)
        click.echo(f"\n{len(kit.rules.nodes)} rules and {len(kit.signatures.signatures)} signatures: valid.")
    from .logs.signature_files import repeats_a_varying_group
    for sig in kit.signatures.signatures:
        if repeats_a_varying_group(sig.regex):
            tell(f"vtriage: warning: {sig.origin}: signature {sig.id}.regex repeats a group that repeats itself "
                 f"(like (a+)+): it can take exponential time on a line it almost matches; each search is cut "
                 f"after {MATCH_TIMEOUT_S:g} s and the line skipped (hint: give the inner repeat a separator, "
                 "e.g. (?:\\w+ )* instead of (?:\\w+\\s?)*)")


# --- capacity: what-if and the pre-deploy check -----------------------------------------------------

# Upper bounds too: a figure no deployment has is a typo, and must not overflow the capacity model.
_TOKENS = click.IntRange(1, 2**31 - 1)
_GPUS = click.IntRange(1, 4096)
_SERVE_FLAGS = (
    ("--gpu-memory-utilization", "gpu_memory_utilization", _Finite("the GPU's memory (a share)", min=1e-3, max=1),
     "Share of the GPU vLLM may use."),
    ("--max-model-len", "max_model_len", _TOKENS, "Longest request, in tokens."),
    ("--max-num-seqs", "max_num_seqs", _TOKENS, "Requests batched at once."),
    ("--max-num-batched-tokens", "max_num_batched_tokens", _TOKENS, "Tokens in one scheduler step."),
    ("--tensor-parallel-size", "tensor_parallel_size", _GPUS, "GPUs the weights are split over."),
    ("--pipeline-parallel-size", "pipeline_parallel_size", _GPUS, "Pipeline stages."),
    ("--dtype", "dtype", click.Choice(["auto", "bfloat16", "float16", "half", "float32"]), "Weight dtype."),
    ("--kv-cache-dtype", "kv_cache_dtype", click.Choice(["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"]),
     "KV cache dtype."),
    ("--quantization", "quantization", click.Choice(["fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "bitsandbytes",
                                                     "mxfp4"]), "Weight quantization."),
    ("--cpu-offload-gb", "cpu_offload_gb", _Finite("GiB", min=0, max=1e6),
     "GiB of weights per GPU kept in CPU memory."),
)


def _serve_flags(fn):
    """The vllm serve flags the capacity model understands, under their vllm names."""
    fn = click.option("--enforce-eager", "enforce_eager", is_flag=True, default=None,
                      help="No CUDA graphs (frees their memory).")(fn)
    for flag, name, kind, text in reversed(_SERVE_FLAGS):
        fn = click.option(flag, name, type=kind, default=None, help=text)(fn)
    return fn


def _changes(options: dict) -> dict:
    return {name: options[name] for _, name, _, _ in _SERVE_FLAGS if options.get(name) is not None} | \
        ({"enforce_eager": True} if options.get("enforce_eager") else {})


def _log_facts(path: str, rules_dir: str | None) -> Mapping[str, Fact]:
    kit = load_toolkit(rules_dir)
    report = build_report(Incident(logs=(open_log(path, tell),)), kit)
    facts = report.diagnosis.facts
    if not any(name in facts for name in ("weights_gib", "kv_cache_gib", "kv_cache_tokens", "gpu_total_gib")):
        raise NotEnoughInput(path, "has no startup memory figures (weights, KV cache) to calibrate from",
                             "give the log of a startup that got as far as loading the weights")
    return facts


def _lengths_from_metrics(paths: tuple[str, ...]):
    from .capacity.lengths import observed_lengths
    from .metrics.inputs import read_files
    lengths = observed_lengths(read_files(paths, None).samples) if paths else None
    if paths and lengths is None:
        tell("vtriage: warning: no vllm:request_prompt_tokens / vllm:request_generation_tokens histograms "
             "in the metrics; concurrency at the observed request sizes is not computed")
    return lengths


def _spec(path: str | None):
    if not path:
        return None
    from .capacity.hfconfig import spec_from_json
    text, where = read_model_config(path)
    return spec_from_json(text, where)


def _emit(scenario, kind: str, fmt: str, output: str | None, inputs: tuple[str, ...]) -> None:
    from .render.capacity import render_scenario_json, render_scenario_text
    title = "WHAT IF" if kind == "whatif" else "PRE-DEPLOY CHECK"
    text = render_scenario_json(scenario, kind) if fmt == "json" else \
        render_scenario_text(scenario, title, color=_use_color(fmt, output))
    if output:
        write_atomically(output, text, inputs)
    else:
        click.echo(text, nl=False)
    sys.exit({"fits": EXIT_HEALTHY, "unknown": EXIT_INCONCLUSIVE}.get(scenario.verdict, EXIT_PROBLEM))


_RELEASE = r"v?\d+\.\d+(\.\d+)*([.+-]?[0-9A-Za-z]+)*"


def _release(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--vllm-version: one syntax for every command, a release like 0.10.2 (0.10 and v0.10.2 too)."""
    if value is None:
        return None
    if not re.fullmatch(_RELEASE, value):
        raise click.BadParameter(f"{value!r} is not a vLLM release like 0.10.2")
    return value.removeprefix("v")


def _vllm_version_option(text: str):
    return click.option("--vllm-version", metavar="X.Y.Z", callback=_release, help=text)


_FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"], case_sensitive=False), default="text",
                       show_default=True, help="Output format (default: the one -o's extension names, else text).")
_OUTPUT = click.option("-o", "--output", metavar="PATH",
                       help="Write to PATH (atomically) instead of stdout; .json picks json.")


@cli.command("whatif")
@click.argument("log", metavar="LOG")
@_serve_flags
@click.option("--metrics", "metrics_files", multiple=True, metavar="FILE",
              help="/metrics snapshots whose request-size histograms give the observed prompt + output lengths.")
@click.option("--model-config", metavar="CONFIG", help="The model's local config.json: exact weight and KV sizes.")
@_gpu_options
@click.option("--rules", "rules_dir", metavar="DIR", help="Use the signatures in DIR instead of the bundled ones.")
@_FORMAT
@_OUTPUT
@click.pass_context
def whatif_command(ctx: click.Context, log: str, metrics_files: tuple[str, ...], model_config: str | None,
                   gpu_name: str | None, gpu_memory_gib: float | None, gpus: int | None, rules_dir: str | None,
                   fmt: str, output: str | None, **options) -> None:
    """What the incident's server would do with other flags, from the log's own figures.

    \b
      vtriage whatif server.log --max-model-len 32768
      vtriage whatif server.log --gpu-memory-utilization 0.95 --kv-cache-dtype fp8 --format json
      vtriage whatif server.log --gpu-memory-utilization 0.95 --gpu L4     (a log that does not print the total)
      vtriage whatif server.log --max-num-seqs 128 --metrics m0.prom --metrics m1.prom
    Exit codes: 0 it would start (and hold max-num-seqs at the observed sizes), 1 a problem is predicted,
    2 usage or input error, 3 the log lacks the figures to predict.
    """
    from .capacity.registry import NO_USER_FIGURES
    from .capacity.scenario import whatif
    fmt = output_format(ctx, fmt.lower(), output, ("text", "json"))
    read = tuple(p for p in (log, *metrics_files, model_config) if p)
    check_output(output, read)
    changes = _changes(options)
    _refuse_more_gpus_than(gpus, changes)
    figures = _user_figures(gpu_name, gpu_memory_gib, gpus, model_config) or NO_USER_FIGURES
    facts = _log_facts(log, rules_dir)
    lengths = _lengths_from_metrics(metrics_files)
    scenario = whatif(facts, changes, figures, lengths, "observed in the metrics" if lengths else "")
    _emit(scenario, "whatif", fmt, output, read)


@cli.command("check")
@_serve_flags
@click.option("--model-config", metavar="CONFIG", help="The model's local Hugging Face config.json (or its folder).")
@click.option("--from-log", "from_log", metavar="LOG", help="Calibrate from a previous startup log instead.")
@_gpu_options
@click.option("--expect-prompt-tokens", type=_TOKENS, help="Typical prompt length, in tokens.")
@click.option("--expect-output-tokens", type=_TOKENS, help="Typical output length, in tokens.")
@_vllm_version_option("The vLLM release to model, e.g. 0.10.2 (default: a current one, 0.20+).")
@click.option("--disable-sliding-window", is_flag=True,
              help="As vllm serve's flag: every layer keeps the full context.")
@click.option("--metrics", "metrics_files", multiple=True, metavar="FILE",
              help="With --from-log: /metrics snapshots whose histograms give the expected lengths.")
@click.option("--rules", "rules_dir", metavar="DIR", help="Use the signatures in DIR instead of the bundled ones.")
@_FORMAT
@_OUTPUT
@click.pass_context
def check_command(ctx: click.Context, model_config: str | None, from_log: str | None, gpu_name: str | None,
                  gpu_memory_gib: float | None, gpus: int | None, expect_prompt_tokens: int | None,
                  expect_output_tokens: int | None, vllm_version: str | None, disable_sliding_window: bool,
                  metrics_files: tuple[str, ...], rules_dir: str | None, fmt: str, output: str | None,
                  **options) -> None:
    """Predict the verdict before a rollout, from a model's config.json or a previous startup log.

    \b
      vtriage check --model-config config.json --gpu H100 --max-model-len 32768
      vtriage check --model-config ./Llama-3.1-70B-Instruct --gpu-memory-gib 80 --gpus 4 --tensor-parallel-size 4
      vtriage check --from-log last-startup.log --max-num-seqs 512 --expect-prompt-tokens 2000 --expect-output-tokens 500
    Exit codes: 0 it fits, 1 a problem is predicted, 2 usage or input error, 3 not enough figures to predict.
    """  # noqa: E501 - --help prints each example command on one line
    from .capacity.lengths import Lengths
    from .capacity.model import Settings
    from .capacity.registry import NO_USER_FIGURES
    from .capacity.scenario import check
    if not model_config and not from_log:
        raise click.UsageError("give --model-config config.json (with --gpu NAME or --gpu-memory-gib GIB) "
                               "or --from-log LOG")
    if model_config and not from_log and not (gpu_name or gpu_memory_gib):
        raise click.UsageError("--model-config needs the memory of one GPU: give --gpu NAME (e.g. H100) "
                               "or --gpu-memory-gib GIB (e.g. 80)")
    fmt = output_format(ctx, fmt.lower(), output, ("text", "json"))
    read = tuple(p for p in (model_config, from_log, *metrics_files) if p)
    check_output(output, read)
    if (expect_prompt_tokens is None) != (expect_output_tokens is None):
        raise click.UsageError("give both --expect-prompt-tokens and --expect-output-tokens, or neither")
    changes = _changes(options)
    _refuse_more_gpus_than(gpus, changes)
    figures = _user_figures(gpu_name, gpu_memory_gib, gpus, model_config) or NO_USER_FIGURES
    lengths = None
    if expect_prompt_tokens is not None and expect_output_tokens is not None:
        lengths = Lengths(0, float(expect_prompt_tokens), float(expect_output_tokens), None, None, (), "expected")
    elif metrics_files:
        lengths = _lengths_from_metrics(metrics_files)
    facts = _log_facts(from_log, rules_dir) if from_log else None
    scenario = check(facts, figures, Settings().replace(**changes), changes, lengths, vllm_version,
                     sliding_window=not disable_sliding_window)
    _emit(scenario, "check", fmt, output, read)


def _refuse_more_gpus_than(gpus: int | None, changes: Mapping[str, Any]) -> None:
    needed = changes.get("tensor_parallel_size", 1) * changes.get("pipeline_parallel_size", 1)
    if gpus is not None and needed > gpus:
        raise click.UsageError(f"tensor x pipeline parallel size is {needed}, but --gpus is {gpus}")


def _user_figures(gpu_name: str | None, gpu_memory_gib: float | None, gpus: int | None,
                  model_config: str | None) -> UserFigures | None:
    """What the user says the log lacks: the GPU (by name or memory), the node's GPU count, the model's config;
    None when nothing is given (the capacity model then loads only if a fix needs it)."""
    if not (gpu_name or gpu_memory_gib or gpus or model_config):
        return None
    from .capacity.catalog import GPU_NAMES, known_gpu
    from .capacity.registry import UserFigures
    if gpu_name and gpu_memory_gib:
        raise click.UsageError("--gpu and --gpu-memory-gib both give the GPU's memory; give one")
    total, source = gpu_memory_gib, f"--gpu-memory-gib {gpu_memory_gib:g}" if gpu_memory_gib else ""
    if gpu_name:
        gpu = known_gpu(gpu_name)
        if gpu is None:
            raise click.UsageError(f"--gpu {gpu_name!r} is not a GPU vtriage knows ({', '.join(GPU_NAMES)}); "
                                   "give its memory instead: --gpu-memory-gib GIB")
        total, source = gpu.total_gib, f"--gpu {gpu_name} ({gpu.name}: {gpu.total_gib:g} GiB, {gpu.how})"
    return UserFigures(spec=_spec(model_config), gpus=gpus, gpu_total_gib=total, gpu_source=source)


def _gpu_snapshot(path: str | None, probe_now: bool, vllm_pids: Sequence[int]) -> GpuSnapshot | None:
    if path:
        from .gpu.smi import read_gpu_input
        return read_gpu_input(read_small_text(path), path, vllm_pids)
    if probe_now:
        from .gpu.probe import import_nvml, probe
        return probe(import_nvml(), vllm_pids)
    return None


@cli.command("gpu")
@click.option("--format", "fmt", type=click.Choice(["text", "json"], case_sensitive=False), default="text",
              show_default=True, help="json: a snapshot file for `vtriage LOG --gpu-snapshot FILE`.")
@click.option("--json", "as_json", is_flag=True, hidden=True, help="Same as --format json (older spelling).")
@click.option("--from", "from_file", metavar="FILE",
              help="Read pasted nvidia-smi output (or a snapshot) instead of asking this node's GPUs.")
@click.option("--vllm-pid", "vllm_pids", multiple=True, type=int, metavar="PID",
              help="The vLLM server's process (repeat); it and its children are vLLM, everything else is not.")
@click.option("-o", "--output", metavar="PATH", help="Write to PATH (atomically) instead of stdout; .json picks json.")
@click.pass_context
def gpu_command(ctx: click.Context, fmt: str, as_json: bool, from_file: str | None, vllm_pids: tuple[int, ...],
                output: str | None) -> None:
    """List each GPU's memory and the processes holding it, flagging those that are not vLLM.

    Run it on the GPU node (NVML, from `pip install 'vtriage[gpu]'`). Exit codes: 0 only vLLM holds
    memory, 1 another process does, 3 a process cannot be told apart from vLLM, 4 no GPU, driver or
    nvidia-ml-py here."""
    if as_json and ctx.get_parameter_source("fmt") == click.core.ParameterSource.COMMANDLINE and fmt != "json":
        raise click.UsageError(f"--json and --format {fmt} contradict each other; give --format json")
    fmt = output_format(ctx, "json" if as_json else fmt.lower(), output, ("text", "json"))
    check_output(output, (from_file,) if from_file else ())
    from .gpu.probe import import_nvml, probe, snapshot_json
    from .gpu.smi import read_gpu_input
    from .render.gpu import render_gpu_text
    snap = read_gpu_input(read_small_text(from_file), from_file, vllm_pids) if from_file else \
        probe(import_nvml(), vllm_pids)
    text = snapshot_json(snap) if fmt == "json" else render_gpu_text(snap)
    if output:
        write_atomically(output, text, (from_file,) if from_file else ())
    else:
        click.echo(text, nl=False)
    if any(p.vllm is False and (p.used_mib is None or p.used_mib > 0) for p in snap.processes):
        sys.exit(EXIT_PROBLEM)
    sys.exit(EXIT_INCONCLUSIVE if any(p.vllm is None for p in snap.processes) else EXIT_HEALTHY)


def _log_report(files: Sequence[str], kit: Toolkit, no_redact: bool, figures: UserFigures | None = None) -> Report:
    """The report of log files alone (no metrics), as `vtriage FILE...` would give it (with what `figures` adds)."""
    return build_report(Incident(logs=tuple(open_log(path, tell) for path in files), user_figures=figures,
                                 redact=not no_redact), kit)


@cli.command("diff")
@click.argument("pair", nargs=-1, metavar="BEFORE AFTER")
@click.option("--before", "before", multiple=True, metavar="FILE",
              help="Instead of BEFORE AFTER, for several files of one run: a log from before the change (repeat).")
@click.option("--after", "after", multiple=True, metavar="FILE",
              help="A log from after the change (repeat); with --before.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"], case_sensitive=False), default="text",
              show_default=True, help="Output format (default: the one -o's extension names, else text).")
@click.option("-o", "--output", metavar="PATH", help="Write the comparison to PATH (atomically); .json picks json.")
@click.option("--rules", "rules_dir", metavar="DIR", help="Use the rules and signatures in DIR.")
@click.option("--no-redact", is_flag=True, help="Show secrets in the output instead of ***.")
@_config_options
@_gpu_options
@click.option("--model-config", metavar="CONFIG",
              help="The model's local config.json (or its folder), for the fixes of both sides.")
@click.pass_context
def diff_command(ctx: click.Context, pair: tuple[str, ...], before: tuple[str, ...], after: tuple[str, ...], fmt: str,
                 output: str | None, rules_dir: str | None, no_redact: bool, config_path: str | None,
                 no_config: bool, ignore: tuple[str, ...], gpu_name: str | None, gpu_memory_gib: float | None,
                 gpus: int | None, model_config: str | None) -> None:
    """Did the fix work? Compare the server's log BEFORE and AFTER a change: verdict, KV headroom,
    preemption, concurrency and settings, side by side. Exits as `vtriage AFTER` would.

    What the logs lack (one server: the same for both) can be given, as to `vtriage FILE`: --gpu NAME or
    --gpu-memory-gib, --gpus, --model-config; they size and check the next fix for AFTER."""
    from .render.diff import render_diff_json, render_diff_text
    from .report.diff import compare
    if pair and (before or after):
        raise click.UsageError("give BEFORE AFTER, or --before/--after, not both")
    if pair:
        if len(pair) != 2:
            raise click.UsageError("diff compares two logs: vtriage diff BEFORE AFTER "
                                   "(several files per side: --before F --before G --after H)")
        before, after = (pair[0],), (pair[1],)
    if not before or not after:
        raise click.UsageError("diff needs both sides: vtriage diff BEFORE AFTER")
    if (before + after).count("-") > 1:
        raise click.UsageError("stdin (-) can be given only once")
    fmt = output_format(ctx, fmt.lower(), output, ("text", "json"))
    read = before + after + ((model_config,) if model_config else ())
    check_output(output, read)
    figures = _user_figures(gpu_name, gpu_memory_gib, gpus, model_config)
    kit, _ = load_team_config(load_toolkit(rules_dir), config_path, no_config, ignore)
    comparison = compare(_log_report(before, kit, no_redact, figures), _log_report(after, kit, no_redact, figures),
                         kit.rules.classes)
    text = (render_diff_json if fmt == "json" else render_diff_text)(comparison)
    if output:
        write_atomically(output, text, read)
    else:
        click.echo(text, nl=False)
    sys.exit(exit_code_for(comparison.after.diagnosis.verdict))


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"


@cli.command("alerts")
@click.argument("files", nargs=-1, metavar="[LOG...]")
@click.option("--format", "kind", type=click.Choice(["prometheusrule", "rules"]), default="prometheusrule",
              show_default=True, help="A PrometheusRule (Prometheus Operator CRD) or a plain Prometheus rules file.")
@click.option("--namespace", metavar="NS", help="The PrometheusRule's namespace; also limits every series to it.")
@click.option("--container", default=".*vllm.*", show_default=True, metavar="REGEX",
              help="kube-state-metrics container label of the vLLM server, for the restart alert.")
@_vllm_version_option("Use this release's metric names instead of the log's, e.g. 0.10.2.")
@click.option("--engine", type=click.Choice(["v0", "v1"]), help="The engine generation, when the log does not say.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Extra PrometheusRule label, e.g. release=kube-prometheus-stack for its ruleSelector.")
@click.option("-o", "--output", metavar="PATH", help="Write the rules to PATH (atomically).")
@click.option("--rules", "rules_dir", metavar="DIR", help="Use the rules and signatures in DIR.")
@_config_options
def alerts_command(files: tuple[str, ...], kind: str, namespace: str | None, container: str,
                   vllm_version: str | None, engine: str | None, labels: tuple[str, ...], output: str | None,
                   rules_dir: str | None, config_path: str | None, no_config: bool, ignore: tuple[str, ...]) -> None:
    """Print alert rules that would catch LOG's failure next time: KV cache near full, preemption rate,
    a growing queue, restarts; with the metric names of the vLLM version in LOG (or --vllm-version)."""

    from .alerts import AlertSpec, header_lines, metric_names, render
    from .report.runbooks import runbook_link
    if namespace is not None and not re.fullmatch(_DNS_LABEL, namespace):
        raise click.UsageError(f"--namespace {namespace!r} is not a Kubernetes namespace name (lower case, digits, -)")
    if '"' in container or "\\" in container:
        raise click.UsageError("--container is a regular expression without quotes or backslashes")
    try:
        re.compile(container)
    except re.error as exc:
        raise click.UsageError(f"--container {container!r} is not a regular expression: {exc}") from None
    extra = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", key):
            raise click.UsageError(f"--label {item!r}: write KEY=VALUE with a Kubernetes label key")
        extra[key] = value
    check_output(output, files)
    kit, _ = load_team_config(load_toolkit(rules_dir), config_path, no_config, ignore)
    report = _log_report(files, kit, no_redact=False) if files else None
    facts = report.diagnosis.facts if report else {}
    version = vllm_version or (facts["vllm_version"].value if "vllm_version" in facts else None)
    engine = engine or (facts["engine"].value if "engine" in facts else None)
    source = ("vLLM version given with --vllm-version" if vllm_version else
              "vLLM version read from the log" if version else
              "no vLLM version known: the rules watch both KV usage names (give a log or --vllm-version)")

    def runbook_for(verdict: str) -> tuple[str, str | None]:
        return (kit.rules.classes[verdict].runbook,
                runbook_link(verdict, kit.rules, kit.runbook_url) if kit.runbook_url else None)

    spec = AlertSpec(namespace=namespace, container=container, verdict=report.diagnosis.verdict if report else None,
                     runbook=runbook_for, labels=extra,
                     header=header_lines([i.path for i in report.inputs] if report else (),   # masked, as read
                                         report.diagnosis.verdict if report else None, source, kit.runbook_url))
    text = render(kind, metric_names(version, engine), spec)
    if output:
        write_atomically(output, text, files)
    else:
        click.echo(text, nl=False)


@cli.command("selftest")
@click.option("--fixtures", "fixtures_dir", metavar="DIR",
              help="Check the logs in DIR (DIR/manifest.toml and DIR/logs/GEN/*.log) instead of the bundled ones.")
@click.option("--rules", "rules_dir", metavar="DIR", help="Use the rules and signatures in DIR.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-v", "--verbose", is_flag=True, help="List every fixture, not only the failures.")
def selftest_command(fixtures_dir: str | None, rules_dir: str | None, fmt: str, verbose: bool) -> None:
    """Diagnose the bundled fixture logs (each verdict in each vLLM generation) and print a pass/fail
    table: one command to check an install, a rules change, or logs of a new vLLM version.
    Exit 0 when every fixture passes, 1 when one does not."""
    from .render.selftest import render_selftest_json, render_selftest_text
    from .selftest import bundled_fixtures, run_selftest
    directory = Path(fixtures_dir) if fixtures_dir else bundled_fixtures()
    if fixtures_dir and not directory.is_dir():
        raise InputError(fixtures_dir, "is not a directory", "give a folder holding manifest.toml and logs/")
    results = run_selftest(load_toolkit(rules_dir), directory)
    text = (render_selftest_json if fmt == "json" else render_selftest_text)(results, verbose=verbose,
                                                                               source=str(directory))
    click.echo(text, nl=False)
    sys.exit(EXIT_HEALTHY if all(r.passed for r in results) else EXIT_PROBLEM)


@cli.command("explain")
@click.argument("topic", required=False, metavar="VERDICT|RULE")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown"], case_sensitive=False), default="text",
              show_default=True, help="text: the page laid out for reading; markdown: its source, for pasting.")
@click.option("--rules", "rules_dir", metavar="DIR", help="Resolve rule ids in DIR instead of the bundled rules.")
def explain_command(topic: str | None, fmt: str, rules_dir: str | None) -> None:
    """Print the runbook for VERDICT (or for the verdict a RULE gives; any case); without one, list them."""
    from .render.runbook import render_runbook_text
    from .report.runbooks import resolve_topic, runbook_text
    kit = load_toolkit(rules_dir)
    if topic is None:
        for verdict in VERDICTS:
            cls = kit.rules.classes[verdict]
            click.echo(f"{verdict:<20} {cls.severity:<9} {cls.title}")
        click.echo("\nvtriage explain VERDICT prints its runbook (Meaning, Impact, Diagnosis, Mitigation).")
        return
    page = runbook_text(resolve_topic(topic.strip().lower(), kit.rules))
    click.echo(page if fmt.lower() == "markdown"
               else render_runbook_text(page, color=_use_color("text", None)), nl=False)


def facts_markdown() -> str:
    """docs/facts.md, generated from the registry so the two cannot drift."""
    lines = ["# Facts", "",
             "The closed vocabulary of the rules (`rules/*.toml`). Units are in the names; ratios are 0-1.",
             "An absent fact means the input did not give it: it is unknown, never zero.", "",
             "Generated by `vtriage rules --facts`; a test keeps this file in step with the code.", "",
             "| fact | type | unit | meaning |", "|---|---|---|---|"]
    for spec in FACTS.values():
        lines.append(f"| `{spec.name}` | {spec.type.__name__} | {spec.unit or ''} | {spec.description} |")
    return "\n".join(lines) + "\n"


class ProgressLine:
    """Reading progress on a terminal's stderr: bytes, rate, time left when the size is known.
    Shown only for a read that takes a while, redrawn at most five times a second, erased at the end."""

    def __init__(self, name: str, size: int | None) -> None:
        self.name, self.size = name, size
        self.start = time.monotonic()
        self.shown = 0.0

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        elapsed = now - self.start
        if elapsed < 1.0 or now - self.shown < 0.2:
            return
        self.shown = now
        rate = done / elapsed
        text = f"reading {self.name}: {done / 2**20:,.0f} MiB"
        if self.size:
            left = (self.size - done) / rate if rate else 0
            text += f" of {self.size / 2**20:,.0f} MiB, {rate / 1e6:,.0f} MB/s, {left:,.0f} s left"
        else:
            text += f", {rate / 1e6:,.0f} MB/s"
        tell(text, before="\r", after="\x1b[K")

    def close(self) -> None:
        """Erase the line once the read is over, so the report starts on a clean line."""
        if self.shown:
            tell("", before="\r", after="\x1b[K")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: every error is one line on stderr and exit code 2, never a traceback."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="vtriage", standalone_mode=False)
    except click.exceptions.Abort:
        tell("vtriage: aborted")
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        tell(f"vtriage: error: {exc.format_message()}")
        sys.exit(EXIT_USAGE)
    except TriageError as exc:
        tell(f"vtriage: error: {exc}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        tell("vtriage: interrupted")
        sys.exit(130)
    except BrokenPipeError:        # the reader of stdout went away (| head): nothing left to say
        _drop_stdout()
        sys.exit(EXIT_USAGE)
    except OSError as exc:          # stdout on a full disk, a read that failed under us
        _drop_stdout()
        if isinstance(exc.filename, str):
            message = f"{exc.filename}: {(exc.strerror or str(exc)).lower()}"
        elif exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            message = str(_write_error("<stdout>", exc))
        else:
            message = (exc.strerror or str(exc)).lower()
        tell(f"vtriage: error: {message}")
        sys.exit(EXIT_USAGE)
    except SystemExit:
        raise
    except Exception as exc:  # the promise: no traceback reaches the user
        if os.environ.get("VTRIAGE_DEBUG"):
            raise
        tell(f"vtriage: internal error: {type(exc).__name__}: {exc} "
             "(set VTRIAGE_DEBUG=1 for the traceback, and please report it)")
        sys.exit(EXIT_USAGE)
    sys.exit(0)


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush of a broken stdout says nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    main()
