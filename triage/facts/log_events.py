"""From a startup attempt's log events to facts (facts/registry.py names them), each with the lines that
support it. A figure the log does not give is absent, never zero."""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ..logs.logtime import month_day_time, seconds_since_start, year_turned
from ..logs.phases import traceback_phase
from ..logs.signatures import SignatureSet
from ..model import Fact, LogEvent, SourceRef
from ..vocabulary import (
    DEFAULT_BLOCK_SIZE,
    GENERIC_FAILURES,
    KV_SATURATED,
    MEMORY_FAILURES,
    PHASE_RANK,
    PHASE_WORDS,
    PHASES,
    RELEASE_BANDS,
    REQUEST_FAILURES,
    default_gpu_memory_utilization,
)
from .registry import FACTS

SELF_MATCH_GIB = 1.5        # torch's "Process N has X" is vLLM itself when X ~ its own allocations
CUDA_CONTEXT_GIB = 1.0      # a process's CUDA context and libraries, outside torch's allocator (0.3-1 GiB)
MAX_EVIDENCE = 4
# Intervals in a row the same requests may run without a token processed before it is a hang rather than a long
# prefill (a slow CPU backend takes more than one 10 s interval over a long prompt).
STALL_RUNNING_INTERVALS = 3
# Event kinds that show an engine serving requests, and how to say so.
_SERVING_KINDS: Mapping[str, str] = {
    "stats": "it printed periodic stats", "preemption": "it preempted a request",
    "serving_progress": "it was processing prompts",
    "request_rejected": "it answered a request it refused",
}


# Config keys read straight from events, with the event kinds to trust first.
_CONFIG_KEYS = ("model", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size",
                "max_num_seqs", "max_num_batched_tokens", "dtype", "quantization", "kv_cache_dtype",
                "enforce_eager", "enable_prefix_caching", "block_size", "swap_space_gib", "vllm_version", "platform")
_KIND_TRUST = {"auto_fit": 0, "kv_too_small": 0, "max_model_len": 1, "kv_cache_size": 2,
               "max_concurrency": 2, "args": 3,
               "engine_config": 4, "memory_profile": 5, "free_memory_low": 5, "memory_usage": 5, "version": 6,
               "model_name": 6, "load_start": 7, "long_context_warning": 8}
_NONE_STRINGS = frozenset({"None", "none", "", "null"})
# Settings vLLM refuses outside these bounds: a log that shows one is mangled, and the value is unknown.
_SETTING_BOUNDS: Mapping[str, tuple[float, float]] = {
    "max_model_len": (1, float("inf")), "tensor_parallel_size": (1, float("inf")),
    "pipeline_parallel_size": (1, float("inf")), "max_num_seqs": (1, float("inf")),
    "max_num_batched_tokens": (1, float("inf")), "block_size": (1, float("inf")),
    "gpu_memory_utilization": (1e-9, 1.0),
}
_V1_PROCESS = re.compile(r"^(?:EngineCore|APIServer|ApiServer|VllmWorker rank|VllmWorker |Worker|DPSupervisor)")
_V0_PROCESS = re.compile(r"^VllmWorkerProcess\b")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class _Facts:
    """A small builder: first writer wins unless a caller says otherwise."""

    def __init__(self) -> None:
        self.facts: dict[str, Fact] = {}

    def put(self, name: str, value: Any, evidence: Iterable[SourceRef] = (), note: str | None = None,
            replace: bool = False) -> None:
        if value is None or (name in self.facts and not replace):
            return
        spec = FACTS[name]
        if spec.type is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = round(float(value), 4)
        refs = tuple(dict.fromkeys(evidence))[:MAX_EVIDENCE]
        self.facts[name] = Fact(name, value, spec.unit, refs, note)

    def value(self, name: str) -> Any:
        fact = self.facts.get(name)
        return None if fact is None else fact.value


def _first_with(events: Sequence[LogEvent], key: str, trust: Mapping[str, int] = _KIND_TRUST) -> LogEvent | None:
    candidates = [e for e in events if key in e.fields and not _is_none(e.fields[key])
                  and _possible(key, e.fields[key])]
    if not candidates:
        return None
    return min(candidates, key=lambda e: (trust.get(e.kind, 9), e.seq))


def _possible(key: str, value: Any) -> bool:
    bounds = _SETTING_BOUNDS.get(key)
    if bounds is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return bounds[0] <= value <= bounds[1]


def _is_none(value: Any) -> bool:
    return isinstance(value, str) and value.strip() in _NONE_STRINGS


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    m = _VERSION.match(version)
    return tuple(int(g or 0) for g in m.groups()) if m else None


def extract_facts(events: Sequence[LogEvent], signatures: SignatureSet,
                  earlier: Sequence[LogEvent] = ()) -> dict[str, Fact]:
    """Facts for one attempt. `earlier` attempts only fill settings this attempt did not print."""
    out = _Facts()
    _settings(out, events, earlier)
    _engine(out, events)
    _release_band(out, events, signatures)
    _profile_batch(out, events)
    root = _root_failure(events, signatures)
    _failure_facts(out, events, signatures, root)
    _memory(out, events, root[0] if root else None)
    _serving(out, events)
    return out.facts


def _settings(out: _Facts, events: Sequence[LogEvent], earlier: Sequence[LogEvent]) -> None:
    for key in _CONFIG_KEYS:
        for pool, note in ((events, None), (earlier, "from an earlier startup attempt in the same log")):
            event = _first_with(pool, key)
            if event is not None:
                out.put(key, event.fields[key], [event.source], note)
                break
    _default_utilization(out, events)
    _tensor_parallel_from_ranks(out, events)
    _platform_from_kv_device(out, events)


def _default_utilization(out: _Facts, events: Sequence[LogEvent]) -> None:
    """`non-default args` omits gpu_memory_utilization when it is vLLM's default (0.9, 0.92 from 0.20)."""
    if "gpu_memory_utilization" in out.facts:
        return
    printed = [e for e in events if e.fields.get("args_style") == "non_default"]
    version = _version_tuple(out.value("vllm_version"))
    if not printed or version is None:
        return
    default = default_gpu_memory_utilization(version)
    out.put("gpu_memory_utilization", default, [printed[0].source],
            f"vLLM {out.value('vllm_version')}'s default: not among the non-default args")


def _tensor_parallel_from_ranks(out: _Facts, events: Sequence[LogEvent]) -> None:
    """Before 0.11.1 every rank prints its own "weights loaded" line: count them."""
    if "tensor_parallel_size" in out.facts:
        return
    loaded = [e for e in events if e.kind == "weights_loaded"]
    ranks = {e.process for e in loaded}
    if len(ranks) > 1:
        out.put("tensor_parallel_size", len(ranks), [e.source for e in loaded],
                f"inferred: {len(ranks)} processes each printed their own weights-loaded line")


_KV_DEVICE_PLATFORM = {"CPU": "cpu", "XPU": "xpu", "TPU": "tpu", "HPU": "hpu"}
_OOM_DEVICE_PLATFORM = {"HIP": "rocm", "XPU": "xpu", "DPCPP": "xpu", "NPU": "npu", "TPU": "tpu", "CUDA": "cuda"}


def _platform_from_kv_device(out: _Facts, events: Sequence[LogEvent]) -> None:
    """V1 names the KV cache's device ("CPU KV cache size: ..."), torch its own in an OOM ("HIP out of
    memory"): the platform when nothing else said."""
    if "platform" in out.facts:
        return
    sized = next((e for e in events if e.fields.get("device") in _KV_DEVICE_PLATFORM), None)
    if sized is not None:
        out.put("platform", _KV_DEVICE_PLATFORM[sized.fields["device"]], [sized.source],
                f"the KV cache is on the {sized.fields['device']}")
        return
    oom = next((e for e in events if e.fields.get("oom_device") in _OOM_DEVICE_PLATFORM), None)
    if oom is not None:
        out.put("platform", _OOM_DEVICE_PLATFORM[oom.fields["oom_device"]], [oom.source],
                f"torch's out-of-memory error names the {oom.fields['oom_device']} device")


def _profile_batch(out: _Facts, events: Sequence[LogEvent]) -> None:
    """The profiling run processes one batch of max_num_batched_tokens. V0 without chunked prefill sets
    that to max(max_model_len, 2048); chunked prefill is on by default for max_model_len > 32K from 0.5.3."""
    if "max_num_batched_tokens" in out.facts:
        fact = out.facts["max_num_batched_tokens"]
        out.put("profile_batch_tokens", fact.value, fact.evidence)
        return
    max_len, version = out.value("max_model_len"), _version_tuple(out.value("vllm_version"))
    if max_len is None or out.value("engine") == "v1" or (version is not None and version >= (0, 8)):
        return
    chunked = next((e for e in events if "chunked_prefill" in e.fields), None)
    if chunked is not None and chunked.fields["chunked_prefill"] is False:
        why, refs = "chunked prefill is off", [chunked.source]
    elif chunked is None and version is not None and version < (0, 5, 3):
        why = f"vLLM {out.value('vllm_version')} has no chunked prefill by default"
        refs = list(out.facts["vllm_version"].evidence)
    else:
        return
    out.put("profile_batch_tokens", max(max_len, 2048), list(out.facts["max_model_len"].evidence) + refs,
            f"{why}, so one batch is max(max_model_len, 2048) tokens")


def _engine(out: _Facts, events: Sequence[LogEvent]) -> None:
    tagged = next((e for e in events if e.fields.get("engine_tag") in ("V0", "V1")), None)
    if tagged is not None:
        out.put("engine", tagged.fields["engine_tag"].lower(), [tagged.source])
        return
    votes: dict[str, list[LogEvent]] = {"v0": [], "v1": []}
    for e in events:
        engine = e.fields.get("engine")
        if engine in votes:
            votes[engine].append(e)
        elif e.process and _V1_PROCESS.match(e.process):
            votes["v1"].append(e)
        elif e.process and _V0_PROCESS.match(e.process):
            votes["v0"].append(e)
    if votes["v0"] or votes["v1"]:
        engine = max(votes, key=lambda k: len(votes[k]))
        out.put("engine", engine, [votes[engine][0].source], "from which lines and processes the log shows")
        return
    version = _version_tuple(out.value("vllm_version"))
    if version is not None:
        out.put("engine", "v1" if version >= (0, 11) else "v0" if version < (0, 8) else None,
                out.facts["vllm_version"].evidence, "from the version")


_BRACKETED_LOGGER = re.compile(r"\d\d:\d\d:\d\d(?:[.,]\d+)? \[[\w./-]+\.py:\d+\]")   # vLLM's logger from 0.8.0


def _release_band(out: _Facts, events: Sequence[LogEvent], signatures: SignatureSet) -> None:
    """With no version in the log, the release bands its formats allow (oldest first). A clue that would leave
    no band is taken as a quirk of the excerpt and does not narrow them."""
    if "vllm_version" in out.facts:
        return
    bands = list(RELEASE_BANDS)
    narrowed_by: list[SourceRef] = []
    for allowed, source in _band_clues(out, events, signatures):
        kept = [band for band in bands if band in allowed]
        if kept and kept != bands:
            bands = kept
            narrowed_by.append(source)
        if len(bands) == 1:
            break
    if narrowed_by:
        out.put("release_band", bands[0], narrowed_by,
                f"the log names no version; its formats fit {' or '.join(bands)}")


def _band_clues(out: _Facts, events: Sequence[LogEvent],
                signatures: SignatureSet) -> Iterator[tuple[Iterable[str], SourceRef]]:
    """The bands each clue allows, with its line: the engine, vLLM's logger prefix ("[file.py:N]" from 0.8.0) and
    the bands each of vLLM's own messages exists in."""
    engine = out.facts.get("engine")
    if engine is not None and engine.evidence and engine.value in ("v0", "v1"):
        yield ("v1",) if engine.value == "v1" else ("v0-old", "v0-late"), engine.evidence[0]
    for e in events:
        if _BRACKETED_LOGGER.search(e.source.text):
            yield ("v0-late", "v1"), e.source
        sig = signatures.by_id[e.signature]
        if sig.bands and sig.source.startswith("vllm/"):
            yield sig.bands, e.source


# --- the failure --------------------------------------------------------------------------------

def _recovered(event: LogEvent, kind: str, events: Sequence[LogEvent], signatures: SignatureSet) -> bool:
    """The server kept going after this error (of failure `kind`): it started, or went on serving, and did not
    die. Stats lines after it show a live engine only while it works or idles: requests that wait on an engine
    that processes nothing are a hang the error caused, not a recovery. A traceback whose type is not shown also
    counts as survived when its own process went on to a later startup phase (a warning printed with its stack,
    not a crash)."""
    stop = next((e.seq for e in events if e.kind == "shutdown" and e.seq > event.seq), None)
    later = [e for e in events if e.seq > event.seq and (stop is None or e.seq < stop)]
    if any(e.kind == "engine_died" for e in later):
        return False
    stats = [e for e in later if e.kind == "stats"]
    if any(e.kind in ("server_up", "engine_ready") for e in later) or (len(stats) >= 2 and _live(stats[-1].fields)):
        return True
    if kind == "engine_hang":       # a long wait the engine came out of: any later line of progress, of any process
        return any(_live(e.fields) for e in stats) or any(
            (sig := signatures.by_id.get(e.signature)) is not None and sig.phase is not None and not sig.failure
            and e.kind != "traceback_frame" for e in later)
    if kind != "unidentified_error":
        return False
    before, _ = _marker_phase(events, signatures, event.seq)
    return any(e.process == event.process and (sig := signatures.by_id.get(e.signature)) is not None
               and sig.phase is not None and not sig.failure and e.kind != "traceback_frame"
               and PHASE_RANK[sig.phase] + (1 if sig.phase_done else 0) > max(before, 0)
               for e in later)


def _live(fields: Mapping[str, Any]) -> bool:
    """A stats interval of an engine that works (it processed tokens) or has nothing to do."""
    if fields.get("prompt_tps") or fields.get("generation_tps"):
        return True
    return not (fields.get("running") or fields.get("waiting") or fields.get("swapped"))


def _root_failure(events: Sequence[LogEvent], signatures: SignatureSet) -> tuple[LogEvent, str] | None:
    """The failure that explains the attempt, and its kind: the first specific one (memory first when several
    are on one line), else the first unexplained exception, else a bare "the engine died", else a traceback
    fragment whose header and error line the excerpt lost."""
    stop = next((e.seq for e in events if e.kind == "shutdown"), None)
    # Once the server is told to stop, its teardown raises generic errors (EngineDeadError, a cancelled
    # output handler) that are the shutdown itself; a specific failure (an OOM) still counts.
    failing = [e for e in events if (sig := signatures.by_id.get(e.signature)) and sig.failure
               and sig.failure not in REQUEST_FAILURES
               and (stop is None or e.seq < stop or sig.failure not in GENERIC_FAILURES)
               and not (e.kind == "traceback_start" and _closed(e, events, signatures))]

    def failure_of(e: LogEvent) -> str:
        return signatures.by_id[e.signature].failure or ""

    fatal = [e for e in failing if not _recovered(e, failure_of(e), events, signatures)]
    specific = [e for e in fatal if failure_of(e) not in GENERIC_FAILURES]
    if specific:
        first_line = min((e.source.path, e.source.line, e.seq) for e in specific)
        same_line = [e for e in specific if (e.source.path, e.source.line) == first_line[:2]]
        same_line.sort(key=lambda e: (failure_of(e) not in MEMORY_FAILURES, e.seq))
        return same_line[0], failure_of(same_line[0])
    for generic in ("exception", "unidentified_error", "engine_died", "engine_hang"):
        found = [e for e in fatal if failure_of(e) == generic]
        if found:
            return found[0], generic
    fragment = _headless_fragment(events, stop)
    if fragment is not None and not _recovered(fragment, "unidentified_error", events, signatures):
        return fragment, "unidentified_error"
    return None


def _one_per_error(failures: Sequence[LogEvent], events: Sequence[LogEvent]) -> list[LogEvent]:
    """The failures, one per error: a line that announces an error ('Error in preprocessing prompt inputs') and the
    exception line ending its traceback are one error: the same process, the same time (or none on the raw
    traceback's line), nothing but traceback lines between them."""
    kept: list[LogEvent] = []
    previous: dict[str | None, LogEvent] = {}        # each process's last event that is not a traceback line
    failing = {e.seq for e in failures}
    for event in events:
        if event.kind in ("traceback_start", "traceback_frame"):
            continue
        before = previous.get(event.process)
        same = (before is not None and before.seq in failing
                and (event.timestamp is None or event.timestamp == before.timestamp))
        if event.seq in failing and not same:
            kept.append(event)
        previous[event.process] = event
    return kept


def _closed(start: LogEvent, events: Sequence[LogEvent], signatures: SignatureSet) -> bool:
    """The traceback `start` opens ends with a line that names its error (a request refused, an EngineDeadError, an
    OOM): that line is the failure, or the request failure the server answered and went on from."""
    for event in events:
        if event.seq <= start.seq or event.process != start.process:
            continue
        if event.kind == "traceback_start":
            return False
        sig = signatures.by_id.get(event.signature)
        if sig is not None and sig.failure and sig.failure != "unidentified_error":
            return True
    return False


_SURVIVED_LEVELS = frozenset({"DEBUG", "INFO", "WARNING"})


def _headless_fragment(events: Sequence[LogEvent], stop: int | None) -> LogEvent | None:
    """The first frame of a traceback cut above its header: vLLM frames with no `Traceback (most recent call
    last)` before them in their process. Printed at ERROR or raw on stderr (an uncaught exception), such frames
    are a failure whose error line is missing; a stack printed with a warning is not."""
    headed: set[str | None] = set()
    for e in events:
        if stop is not None and e.seq > stop:
            break
        if e.kind == "traceback_start":
            headed.add(e.process)
        elif e.kind == "traceback_frame" and e.process not in headed and e.level not in _SURVIVED_LEVELS:
            return e
    return None


def _marker_phase(events: Sequence[LogEvent], signatures: SignatureSet,
                  upto: int | None) -> tuple[int, LogEvent | None]:
    """Furthest phase the markers show, up to event `upto` (inclusive); -1 when none."""
    best, where = -1, None
    for e in events:
        if upto is not None and e.seq > upto:
            break
        sig = signatures.by_id.get(e.signature)
        if sig is None or sig.phase is None or e.kind == "traceback_frame":
            continue
        rank = PHASE_RANK[sig.phase] + (1 if sig.phase_done else 0)
        rank = min(rank, PHASE_RANK["serving"])
        if rank > best:
            best, where = rank, e
    return best, where


def _frame_phase(events: Sequence[LogEvent], signatures: SignatureSet, after: int,
                 process: str | None) -> tuple[int, LogEvent | None]:
    """The phase the frames after `after` (the failing process's, when it printed any) place the failure in,
    read with vLLM's function table (logs/phases.py), and the frame that decides; -1 when none places it."""
    frames = [e for e in events if e.kind == "traceback_frame" and e.seq > after]
    own = [e for e in frames if e.process == process]
    placed = traceback_phase([(e, signatures.frame_phases(e.signature, e.fields)) for e in own or frames])
    if placed is None:
        return -1, None
    phase, frame = placed
    return PHASE_RANK[phase], frame


def _failure_facts(out: _Facts, events: Sequence[LogEvent], signatures: SignatureSet,
                   root: tuple[LogEvent, str] | None) -> None:
    reached, reached_at = _marker_phase(events, signatures, None)
    if reached >= 0 and reached_at is not None:
        out.put("reached_phase", PHASES[reached], [reached_at.source])
    stop = next((e for e in events if e.kind == "shutdown"), None)
    if stop is not None:
        out.put("shut_down", True, [stop.source], "the server was asked to stop; errors after this are its teardown")
    died = [e for e in events if e.kind == "engine_died" and (stop is None or e.seq < stop.seq)]
    if died:
        out.put("engine_died", True, [died[0].source])
    transient = [e for e in events if (sig := signatures.by_id.get(e.signature)) and sig.failure
                 and sig.failure != "unidentified_error"      # a traceback's own error line is counted
                 and (root is None or e is not root[0])
                 and (sig.failure in REQUEST_FAILURES or _recovered(e, sig.failure, events, signatures))]
    errors = _one_per_error(transient, events)
    if errors:
        out.put("transient_errors", len(errors), [e.source for e in errors])
    if root is None:
        return
    failure, kind = root
    out.put("failure_kind", kind, [failure.source])
    out.put("failure_message", failure.source.text, [failure.source])
    if failure.process:
        out.put("failing_process", failure.process, [failure.source])
    same = [e for e in events if signatures.by_id[e.signature].failure == kind]
    processes = {e.process for e in same}
    if len(processes) > 1 or (processes and None not in processes):
        out.put("failing_processes", len(processes), [e.source for e in same])
    marker_rank, marker = _marker_phase(events, signatures, failure.seq)
    frame_rank, frame = _frame_phase(events, signatures, marker.seq if marker else -1, failure.process)
    if frame is not None and (frame_rank >= marker_rank or marker_rank < PHASE_RANK["serving"]):
        phase, why = frame_rank, [frame.source, failure.source]
        note = (f"from the traceback: {frame.fields.get('func', 'a frame')} is part of "
                f"{PHASE_WORDS[PHASES[frame_rank]]}")
        if frame.fields.get("func"):
            out.put("failed_function", frame.fields["func"], [frame.source])
        if frame.fields.get("in_scheduler"):
            out.put("failed_in_scheduler", True, [frame.source],
                    f"{frame.fields.get('path', 'the frame')} is vLLM's scheduler or its KV block manager")
    elif marker is not None:
        phase, why = marker_rank, [marker.source, failure.source]
        marker_sig = signatures.by_id[marker.signature]
        if marker_sig.phase_done and marker_sig.phase != PHASES[marker_rank]:
            ended = PHASE_WORDS.get(str(marker_sig.phase), str(marker_sig.phase))
            note = f"the last startup line before the failure ends {ended}, so it failed in the next phase"
        else:
            note = "from the last startup line before the failure"
    else:
        return
    if "failed_function" not in out.facts and failure.fields.get("method"):
        out.put("failed_function", failure.fields["method"], [failure.source])
    out.put("failed_phase", PHASES[phase], why, note)


# --- memory -------------------------------------------------------------------------------------

# The memory figures read from the startup lines, and which of several to take.
_MEMORY_FIELDS = (("gpu_total_gib", "first"), ("weights_gib", "max"), ("activation_gib", "max"),
                  ("non_torch_gib", "max"), ("cuda_graph_gib", "max"), ("kv_cache_gib", "min"),
                  ("max_concurrency", "min"), ("kv_needed_gib", "first"), ("estimated_max_model_len", "first"),
                  ("budget_gib", "first"), ("free_gib", "first"), ("requested_gib", "first"),
                  ("tried_to_allocate_gib", "first"), ("checkpoint_gib", "max"), ("cuda_graph_estimate_gib", "max"))


def _memory(out: _Facts, events: Sequence[LogEvent], failure: LogEvent | None) -> None:
    oom = failure if failure is not None and failure.kind == "cuda_oom" else None
    check = failure if failure is not None and failure.kind in ("free_memory_low", "kv_memory_low") else None
    put_field = _field_putter(out, events, frozenset(key for key, _ in _MEMORY_FIELDS))
    # The failure's own figures first: they describe the moment it broke.
    for source in (oom, check):
        if source is None:
            continue
        for key in ("gpu_total_gib", "free_gib", "requested_gib", "tried_to_allocate_gib", "allocated_gib",
                    "private_pool_gib", "gpu_memory_utilization", "kv_requested_gib"):
            if key in source.fields:
                out.put(key, source.fields[key], [source.source])
    for key, how in _MEMORY_FIELDS:
        put_field(key, key, how)
    _graph_profiling(out, events)
    _kv_tokens(out, events)
    _budget(out)
    if check is not None and check.kind == "free_memory_low":
        total, free = check.fields.get("gpu_total_gib"), check.fields.get("free_gib")
        if total is not None and free is not None:
            out.put("other_processes_gib", max(0.0, total - free), [check.source],
                    "total minus free at startup, before vLLM allocated anything")
    elif oom is not None:
        _holders_at_oom(out, oom)
    this = out.value("this_process_gib")
    total = out.value("gpu_total_gib")
    if this is not None and total:
        out.put("oom_self_share", this / total, out.facts["this_process_gib"].evidence)


def _field_putter(out: _Facts, events: Sequence[LogEvent], keys: frozenset[str]) -> Callable[[str, str, str], None]:
    """Put a fact from the events' figure `key` (one of `keys`: the events holding none are left out once, not
    searched again for each: a long log's thousands of stats events)."""
    events = [e for e in events if not keys.isdisjoint(e.fields)]

    def put(fact: str, key: str, how: str) -> None:
        found = [e for e in events if isinstance(e.fields.get(key), (int, float))
                 and not isinstance(e.fields.get(key), bool)]
        if not found:
            return
        if how == "first":
            chosen = found[0]
        elif how == "max":
            chosen = max(found, key=lambda e: e.fields[key])
        else:
            chosen = min(found, key=lambda e: e.fields[key])
        ranks = {e.process for e in found}
        note = None
        if how in ("max", "min") and len(ranks) > 1:
            note = f"{'largest' if how == 'max' else 'smallest'} of {len(ranks)} processes"
        out.put(fact, chosen.fields[key], [chosen.source], note)
    return put


def _kv_tokens(out: _Facts, events: Sequence[LogEvent]) -> None:
    sized = [e for e in events if e.kind == "kv_cache_size" and "kv_cache_tokens" in e.fields]
    error = [e for e in events if e.kind == "kv_too_small" and "kv_cache_tokens" in e.fields]
    blocks = [e for e in events if e.kind == "gpu_blocks" and "gpu_blocks" in e.fields]
    if sized:
        smallest = min(sized, key=lambda e: e.fields["kv_cache_tokens"])
        out.put("kv_cache_tokens", smallest.fields["kv_cache_tokens"], [smallest.source])
    elif error:
        out.put("kv_cache_tokens", error[0].fields["kv_cache_tokens"], [error[0].source])
    if blocks:
        smallest = min(blocks, key=lambda e: e.fields["gpu_blocks"])
        out.put("gpu_blocks", smallest.fields["gpu_blocks"], [smallest.source])
        block_size = out.value("block_size") or DEFAULT_BLOCK_SIZE
        note = f"{smallest.fields['gpu_blocks']} blocks x {block_size} tokens per block"
        if out.value("block_size") is None:
            note += " (vLLM's default block size)"
        out.put("kv_cache_tokens", smallest.fields["gpu_blocks"] * block_size, [smallest.source], note)
    sized_ok = [e for e in events if e.kind in ("kv_cache_size", "max_concurrency")]
    if sized_ok and not any(e.kind in ("kv_too_small", "no_cache_blocks") for e in events):
        concurrency = out.value("max_concurrency")
        if concurrency is None or concurrency >= 1.0:
            out.put("kv_cache_sized", True, [sized_ok[0].source])


def _graph_profiling(out: _Facts, events: Sequence[LogEvent]) -> None:
    """0.18+ says whether the CUDA graph estimate comes out of the KV budget, and as what share of the GPU:
    (utilization with - without) x total = the estimate, so the two give the GPU's total when nothing else does."""
    notices = [e for e in events if e.kind == "cuda_graph_profiling"]
    if not notices:
        return
    last = notices[-1]
    out.put("cuda_graph_in_budget", last.fields.get("cuda_graph_in_budget"), [last.source])
    with_, without = last.fields.get("graph_util_with"), last.fields.get("graph_util_without")
    estimate = out.value("cuda_graph_estimate_gib")
    if "gpu_total_gib" not in out.facts and estimate and with_ and without and with_ - without >= 0.001:
        share = with_ - without
        out.put("gpu_total_gib", estimate / share, [last.source] + list(out.facts["cuda_graph_estimate_gib"].evidence),
                f"CUDA graph estimate {estimate} GiB / ({with_} - {without}), the share of the GPU vLLM says it takes "
                f"(to about {0.00005 / share:.1%})")


def _budget(out: _Facts) -> None:
    total, util = out.value("gpu_total_gib"), out.value("gpu_memory_utilization")
    if "budget_gib" not in out.facts and total and util:
        out.put("budget_gib", total * util, out.facts["gpu_total_gib"].evidence
                + out.facts["gpu_memory_utilization"].evidence,
                "gpu_memory_utilization x total")


_Listed = tuple[int, float]          # (pid, GiB) of a process torch's OOM text lists as `Process N has X`


def _holders_at_oom(out: _Facts, oom: LogEvent) -> None:
    """Who held the GPU when torch refused the allocation: this process, other processes, and, when the figures
    cannot tell, processes that may be either.

    torch lists every process NVML reports on the GPU: `this process has X` for its own PID, `Process N has X`
    for each other PID. In a container the PIDs are the host's, so vLLM itself may be a `Process N`. A figure of
    0 bytes is NVML giving none (WSL, some containers), not an empty process. What torch's allocator reserved
    (allocated, private pools included, plus reserved but unallocated) is the least this process holds. With
    no usable list (ROCm, XPU, torch 2.0, NPU, NVML without figures), this process is that plus its device
    context and the rest of the used memory is held outside it."""
    fields = oom.fields
    total, free = fields.get("gpu_total_gib"), fields.get("free_gib")
    used = total - free if total is not None and free is not None and free <= total else None
    reserved, how = fields.get("reserved_gib"), "reserved by PyTorch"
    if reserved is None and fields.get("allocated_gib") is not None:
        reserved = fields["allocated_gib"] + (fields.get("unallocated_gib") or 0.0)
        how = "allocated and reserved by PyTorch"
    listed: list[_Listed] = [(pid, gib) for pid, gib in zip(fields.get("process_pid") or (),
                                                            fields.get("process_gib") or ()) if gib]
    no_figures = "this_process_gib" in fields and not fields["this_process_gib"]
    own, note = fields.get("this_process_gib") or None, None
    unsure: list[_Listed] = []
    if own is None and listed and not no_figures:
        itself, unsure = _self_among(listed, reserved, used)
        listed = [p for p in listed if p not in unsure]
        if itself is not None:
            (pid, own), note = itself
            listed.remove((pid, own))
            note += f" {how}: vLLM itself under its host PID, as in a container's PID namespace"
    measured = own is not None
    if own is None and not unsure and reserved is not None and used is not None:
        own = min(reserved + CUDA_CONTEXT_GIB, used)
        note = (f"{how} {reserved:.2f} GiB plus about {CUDA_CONTEXT_GIB:.0f} GiB of device context"
                + (f", at most the {used:.2f} GiB in use" if own == used else "")
                + ("; torch's process list gives 0 bytes: NVML could not read per-process memory" if no_figures
                   else ""))
    if own is not None:
        out.put("this_process_gib", own, [oom.source], note)
    least_own = own if measured else reserved
    if used is not None and least_own is not None:
        out.put("other_processes_max_gib", max(0.0, used - least_own), [oom.source],
                f"total {total:.2f} - free {free:.2f} - at least {least_own:.2f} GiB held by this process")
    if unsure:
        out.put("unidentified_processes_gib", sum(gib for _, gib in unsure), [oom.source], _unsure_note(unsure))
        out.put("unidentified_process_pids", ", ".join(str(pid) for pid, _ in unsure), [oom.source])
    named = sum(gib for _, gib in listed)
    rest = None if own is None or used is None else used - own
    # A measured share leaves out the few hundred MiB the driver keeps; an estimated one is all there is to go by.
    if rest is not None and (rest > named + SELF_MATCH_GIB if measured else rest >= named):
        if listed:
            listing = f" ({len(listed)} named)"
        elif measured:
            listing = ", though the OOM text names no other process"
        else:
            listing = " (the OOM text gives no process's figure)" if no_figures else " (the OOM text lists no process)"
        share = f"{own:.2f}" if measured else f"about {own:.2f}"
        out.put("other_processes_gib", rest, [oom.source],
                f"total {total:.2f} - free {free:.2f} - this process {share} GiB: held outside this process{listing}")
        return
    # Of several processes that may be vLLM, at most one is: the others' memory is held outside it all the same.
    besides = sum(gib for _, gib in unsure) - max(gib for _, gib in unsure) if len(unsure) > 1 else 0.0
    if own is None and not listed and not besides:
        return                                   # nothing says what others held: unknown, not zero
    parts = [f"{len(listed)} other process(es) named in the OOM text"] if listed else []
    if besides:
        parts.append(f"at least {besides:.2f} GiB of the {len(unsure)} processes that may be vLLM (one at most is)")
    out.put("other_processes_gib", named + besides, [oom.source],
            " plus ".join(parts) or "the OOM text names no other process")
    out.put("other_processes", len(listed) + max(len(unsure) - 1, 0), [oom.source])
    if listed:
        out.put("other_process_pids", ", ".join(str(pid) for pid, _ in listed), [oom.source])


def _self_among(listed: Sequence[_Listed], reserved: float | None,
                used: float | None) -> tuple[tuple[_Listed, str] | None, list[_Listed]]:
    """vLLM itself among the `Process N` entries when torch names none 'this process': (its entry and why, the
    entries that may be it or another process). vLLM holds at least what torch reserved: an entry within
    SELF_MATCH_GIB (or 10 %) of that is vLLM, one below it is another process. An entry above it is vLLM only when
    it is the one place vLLM's memory can be (what the entries leave of the used memory is less than torch
    reserved); otherwise, as when two entries match, the log cannot tell."""
    if reserved is None:
        return None, list(listed)
    tolerance = max(SELF_MATCH_GIB, 0.1 * reserved)
    could = [p for p in listed if p[1] >= reserved - tolerance]
    close = [p for p in could if p[1] <= reserved + tolerance]
    if len(close) == 1:
        pid, gib = close[0]
        return (close[0], f"torch lists no 'this process'; process {pid} ({gib:.2f} GiB) matches the "
                          f"{reserved:.2f} GiB"), []
    unlisted = None if used is None else used - sum(gib for _, gib in listed)
    if not close and len(could) == 1 and unlisted is not None and unlisted < reserved - tolerance:
        pid, gib = could[0]
        return (could[0], f"torch lists no 'this process'; process {pid} ({gib:.2f} GiB) is the only place on the "
                          f"GPU that can hold the {reserved:.2f} GiB"), []
    return None, could


def _unsure_note(unsure: Sequence[_Listed]) -> str:
    if len(unsure) == 1:
        pid, gib = unsure[0]
        return (f"torch lists process {pid} with {gib:.2f} GiB; whether that is vLLM itself (its host PID) or "
                "another process, the log cannot tell")
    listing = ", ".join(f"{pid} ({gib:.2f} GiB)" for pid, gib in unsure)
    return (f"torch lists processes {listing}; which of them is vLLM itself (its host PID) and which another "
            "process, the log cannot tell")


# --- serving ------------------------------------------------------------------------------------

def _stamps(events: Iterable[LogEvent]) -> list[str]:
    """The times the events span, in the log's order: a merged stats event's first interval (`since`) and its
    last."""
    return [stamp for e in events for stamp in (e.fields.get("since"), e.timestamp) if stamp]


def _minutes(stamps: Sequence[str]) -> float | None:
    """The span of `stamps`, given in the log's order, in minutes, the year counted as merge_events counts it
    (logtime.year_turned), and February of 29 days when a stamp says February 29 (the stamps have no year)."""
    clocks = [clock for clock in map(month_day_time, stamps) if clock is not None]
    leap = any(clock[:2] == (2, 29) for clock in clocks)
    keys = []
    year = last_month = 0
    for clock in clocks:
        if year_turned(last_month, clock[0]):
            year += 1
        last_month = clock[0]
        key = seconds_since_start(clock, year, leap)
        if key is not None:
            keys.append(key)
    if len(keys) < 2:
        return None
    span = max(keys) - min(keys)
    return span / 60.0 if span > 0 else None


def _serving(out: _Facts, events: Sequence[LogEvent]) -> None:
    up = [e for e in events if e.kind in ("server_up", "engine_ready")]
    stats = [e for e in events if e.kind == "stats"]
    # An engine embedded in another program (LLM class, Ray actors) prints no server banner: a
    # progress bar over prompts, a preemption or a stats line proves it was serving all the same.
    working = [e for e in events if e.kind in _SERVING_KINDS]
    if up:
        out.put("server_up", True, [up[0].source])
    elif working:
        out.put("server_up", True, [working[0].source],
                f"no start-up banner in the input, but the engine was serving: {_SERVING_KINDS[working[0].kind]}")
    if stats:
        # A stats event may stand for several intervals merged to bound memory (logparse._Bounded).
        intervals = sum(e.fields.get("intervals", 1) for e in stats)
        out.put("stats_lines", intervals, [stats[0].source])
        usage = [e for e in stats if "kv_usage" in e.fields]
        if usage:
            top = max(usage, key=lambda e: e.fields["kv_usage"])
            out.put("kv_cache_usage_max", top.fields["kv_usage"], [top.source])
            total = sum(e.fields.get("kv_usage_sum", e.fields["kv_usage"]) for e in usage)
            counted = sum(e.fields.get("intervals", 1) for e in usage)
            out.put("kv_cache_usage_mean", total / counted, [usage[0].source, usage[-1].source],
                    f"mean of {counted} stats lines")
            saturated = [e for e in usage if e.fields["kv_usage"] >= KV_SATURATED]
            out.put("saturated_intervals",
                    sum(e.fields.get("saturated", 1) for e in saturated), [e.source for e in saturated])
            queued = [e for e in saturated if _queued(e.fields)]
            queued_intervals = sum(e.fields.get("saturated_queue", 1) for e in queued)
            refs = [e.source for e in queued] or [usage[-1].source]
            out.put("saturated_queue_intervals", queued_intervals, refs)
            out.put("saturated_queue_share", queued_intervals / counted, refs,
                    f"{queued_intervals} of {counted} stats intervals")
            busy = sorted(e.fields["running"] for e in saturated if "running" in e.fields)
            if busy:
                out.put("running_at_saturation", busy[len(busy) // 2], [saturated[0].source],
                        f"median over {len(busy)} saturated intervals")
            calm = [e for e in usage if e.fields["kv_usage"] < KV_SATURATED and "running" in e.fields
                    and not e.fields.get("preemptions")]
            if calm:
                top = max(calm, key=lambda e: e.fields["running"])
                out.put("running_below_saturation", top.fields["running"], [top.source])
        engines = _engines(stats)
        _stall(out, engines)
        _queue_at_end(out, engines)
        for key, fact in (("waiting", "waiting_max"), ("running", "running_max"), ("swapped", "swapped_max")):
            having = [e for e in stats if key in e.fields]
            if having:
                top = max(having, key=lambda e: e.fields[key])
                out.put(fact, top.fields[key], [top.source])
    _preemptions(out, events, stats)


def _queued(fields: Mapping[str, Any]) -> bool:
    return bool(fields.get("waiting") or fields.get("swapped"))


def _engines(stats: Sequence[LogEvent]) -> list[list[LogEvent]]:
    """Each engine's stats lines, in order: V1's data-parallel engines share one logger and say which engine a
    line is of (`Engine 001:`), Ray actors each run their own engine in their own process."""
    engines: dict[tuple[str | None, Any], list[LogEvent]] = {}
    for event in stats:
        engines.setdefault((event.process, event.fields.get("engine_index")), []).append(event)
    return list(engines.values())


def _no_progress(fields: Mapping[str, Any]) -> bool:
    """One interval (not several merged) in which requests were there but not one token was processed."""
    return (fields.get("intervals", 1) == 1 and "prompt_tps" in fields and "generation_tps" in fields
            and not fields["prompt_tps"] and not fields["generation_tps"]
            and bool(fields.get("running") or _queued(fields)))


def _stall(out: _Facts, engines: Sequence[Sequence[LogEvent]]) -> None:
    """The longest run of intervals an engine's stats end with in which it processed nothing although requests
    were there: with none running and some waiting (the scheduler stopped admitting), or with the same requests
    running for STALL_RUNNING_INTERVALS intervals (a step that never returns). A queue that empties without a
    token processed (clients gave up) does not end the stall; an interval that processes tokens does."""
    longest: list[LogEvent] = []
    for stats in engines:
        run: list[LogEvent] = []
        for event in reversed(stats):
            fields = event.fields
            idle = not (fields.get("running") or _queued(fields) or fields.get("prompt_tps")
                        or fields.get("generation_tps"))
            if idle and not run:
                continue
            if not _no_progress(fields):
                break
            run.append(event)
        run.reverse()
        if any(e.fields.get("running") for e in run) and len(run) < STALL_RUNNING_INTERVALS:
            run = []
        if len(run) > len(longest):
            longest = run
    if longest:
        waiting = max(e.fields.get("waiting", 0) + e.fields.get("swapped", 0) for e in longest)
        running = max(e.fields.get("running", 0) for e in longest)
        how = (f"up to {waiting} requests waiting, none running" if not running
               else f"{running} request(s) running and up to {waiting} waiting")
        out.put("stalled_intervals", len(longest), [longest[0].source, longest[-1].source],
                f"{how}, no token processed")


def _queue_at_end(out: _Facts, engines: Sequence[Sequence[LogEvent]]) -> None:
    """The queue the stats end with: how many intervals in a row, up to the last one, an engine had requests
    waiting (a queue that did not drain), and how many were waiting in the last one. A merged interval counts
    whole when its peak had a queue."""
    longest: list[LogEvent] = []
    for stats in engines:
        run: list[LogEvent] = []
        for event in reversed(stats):
            if not _queued(event.fields):
                break
            run.append(event)
        if sum(e.fields.get("intervals", 1) for e in run) > sum(e.fields.get("intervals", 1) for e in longest):
            longest = run[::-1]
    last = [stats[-1] for stats in engines]
    out.put("waiting_at_end", sum(e.fields.get("waiting", 0) + e.fields.get("swapped", 0) for e in last),
            [e.source for e in last])
    count = sum(e.fields.get("intervals", 1) for e in longest)
    refs = [longest[0].source, longest[-1].source] if longest else [e.source for e in last]
    note = None
    if longest:
        first, final = longest[0].fields, longest[-1].fields
        start = first.get("waiting", 0) + first.get("swapped", 0)
        end = final.get("waiting", 0) + final.get("swapped", 0)
        note = f"{start} -> {end} requests waiting over the last {count} intervals"
    out.put("queue_persisted_intervals", count, refs, note)


def _preemptions(out: _Facts, events: Sequence[LogEvent], stats: Sequence[LogEvent]) -> None:
    """V0 logs a running total on every 50th preemption; V1 (0.11.1+) a count per stats interval."""
    warnings = [e for e in events if e.kind == "preemption"]
    interval = [e for e in stats if e.fields.get("preemptions")]
    total = 0
    evidence: list[SourceRef] = []
    notes = []
    rates: list[tuple[int, float]] = []          # (preemptions, minutes) measured inside the log
    if warnings:
        out.put("preemption_warnings", len(warnings), [w.source for w in warnings])
        counted = [w for w in warnings if "cumulative_preemptions" in w.fields]
        # Each engine (process) keeps its own counter: an RL job's Ray actors each run one.
        engines: dict[str | None, list[LogEvent]] = {}
        for w in counted:
            engines.setdefault(w.process, []).append(w)
        for own in engines.values():
            top = max(own, key=lambda w: w.fields["cumulative_preemptions"])
            low = min(own, key=lambda w: w.fields["cumulative_preemptions"])
            total += top.fields["cumulative_preemptions"]
            evidence.append(top.source)
            minutes = _minutes([t for t in (low.timestamp, top.timestamp) if t])
            if minutes and top is not low:
                rates.append((top.fields["cumulative_preemptions"] - low.fields["cumulative_preemptions"], minutes))
        if counted:
            notes.append("V0's cumulative counter (it logs every 50th preemption)"
                         + (f", summed over {len(engines)} engines" if len(engines) > 1 else ""))
        uncounted = [w for w in warnings if "cumulative_preemptions" not in w.fields]
        if uncounted:
            total += len(uncounted)
            evidence.extend(w.source for w in uncounted)
            notes.append("warnings without a counter, one preemption each at least")
        repeats = sum(w.fields.get("repeated", 0) for w in warnings)
        if repeats:
            total += repeats
            notes.append(f"{repeats} more printed by other Ray actors ('repeated across cluster'), one each at least")
        mode = warnings[-1].fields.get("preemption_mode")
        if mode:
            out.put("preemption_mode", str(mode).upper(), [warnings[-1].source])
    if interval:
        total += sum(e.fields["preemptions"] for e in interval)
        evidence.extend(e.source for e in interval)
        notes.append(f"sum of 'Preemptions:' over {len(interval)} stats intervals")
        minutes = _minutes(_stamps(stats))
        if minutes:
            # each stats line covers the interval before it, so the window is one interval longer
            lines = sum(e.fields.get("intervals", 1) for e in stats)
            rates.append((sum(e.fields["preemptions"] for e in interval), minutes * lines / max(1, lines - 1)))
    if warnings or interval:
        out.put("preemptions", total, evidence, "; ".join(notes))
    window = _minutes(_stamps(e for e in events if e.kind in ("stats", "preemption")))
    if window:
        out.put("serving_minutes", window, [])
    if rates:
        count = sum(r[0] for r in rates)
        minutes = max(r[1] for r in rates)
        out.put("preemption_rate_per_min", count / minutes, evidence[:2],
                f"{count} preemptions within {minutes:.1f} minutes of log")
