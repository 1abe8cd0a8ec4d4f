"""The command to paste: the incident's own launch, rebuilt from what the log shows, with the fix applied.

vLLM prints how it was launched: `args: Namespace(...)` with every argument (<= 0.8.5), `non-default args:
{...}` with those the user set (0.9.0+; also for the offline `LLM(...)` from 0.10.1), and always the engine's
resolved config (`Initializing an LLM engine ... with config: model=..., max_seq_len=..., ...`). The first two
recover the whole command; the engine config alone recovers only part of it, and the command then says "add
to your command:" rather than pretending to be complete. Secrets (an API key, a Hugging Face token; hidden by
vLLM from 0.29 and by vtriage's redaction) and settings whose values are objects are never printed: they are
listed as not recovered.

Every flag is checked against the argument list of the vLLM release the log shows (triage/report/vllm_args.json,
extracted from each release's wheel by tools/vllm_args.py): a fix whose flag that release does not have is
not made the command, and `check_command` parses a printed command the way that release's parser would.
"""
from __future__ import annotations

import ast
import dataclasses
import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from ..bundled import bundled_dir
from ..model import Fix, LaunchCommand, LogEvent, SourceRef
from ..vocabulary import RELEASE_BAND_FIRST

SERVE, API_SERVER, OFFLINE = "vllm serve", "python -m vllm.entrypoints.openai.api_server", "LLM(...)"
SECRET_DESTS = frozenset({"api_key", "hf_token"})        # and any value printed masked ('***')
_MASKED = re.compile(r"^\*+$")
# Namespace keys argparse adds that are not flags a user sets
_INTERNAL = frozenset({"model_tag", "subparser", "dispatch_function", "func", "model", "cmd"})


# --- the argument lists of vLLM's releases ------------------------------------------------------------

@dataclass(frozen=True)
class ArgumentList:
    """One release's server arguments: flag -> {dest, value, negatable, many, default, aliases}."""

    release: str
    program: str
    arguments: Mapping[str, Mapping[str, Any]]
    by_dest: Mapping[str, str]                   # dest -> its flag

    def flag_for(self, dest: str) -> str | None:
        return self.by_dest.get(dest)

    def spec(self, flag: str) -> tuple[str, Mapping[str, Any]] | None:
        """The argument a flag (or alias, or --no- form) names: (its primary flag, its entry)."""
        if flag in self.arguments:
            return flag, self.arguments[flag]
        for primary, entry in self.arguments.items():
            if flag in entry.get("aliases", ()):
                return primary, entry
        if flag.startswith("--no-") and "--" + flag[5:] in self.arguments:
            entry = self.arguments["--" + flag[5:]]
            if entry.get("negatable"):
                return "--" + flag[5:], entry
        return None


@lru_cache(maxsize=1)
def _releases() -> dict[str, Any]:
    """triage/report/vllm_args.json unpacked: release -> {program, arguments} (the file keeps runs of releases)."""
    import json  # here: a report that rebuilds no command line does not load it
    data = json.loads((bundled_dir("triage.report") / "vllm_args.json").read_text(encoding="utf-8"))
    releases: dict[str, Any] = {r: {"program": p, "arguments": {}} for r, p in zip(data["releases"], data["programs"])}
    for flag, runs in data["arguments"].items():
        for first, last, entry in runs:
            for release in data["releases"][first:last + 1]:
                releases[release]["arguments"][flag] = entry
    return releases


def release_key(version: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", version.split("+")[0].split("rc")[0].split("dev")[0])
    return tuple(int(n) for n in numbers[:4])


LAST_NAMESPACE_RELEASE = "0.8.5.post1"     # the last release that logs `args: Namespace(...)`
FIRST_NON_DEFAULT_RELEASE = "0.9.0"        # the first release that logs `non-default args: {...}`


def _release(chosen: str) -> ArgumentList:
    entry = _releases()[chosen]
    by_dest = {a["dest"]: flag for flag, a in entry["arguments"].items() if flag.startswith("--")}
    return ArgumentList(chosen, entry["program"], entry["arguments"], by_dest)


def _dests(release: str) -> set[str]:
    return {a["dest"] for a in _releases()[release]["arguments"].values()} - _INTERNAL


def argument_list(version: str | None, namespace: Iterable[str] = (),
                  non_default: Iterable[str] = (), band: str | None = None) -> tuple[ArgumentList, str]:
    """The release the log's version runs (the same release, else the newest one before it: a patch or a dev
    build between releases), and in words how it was chosen. With no version in the log, the keys of an
    `args: Namespace(...)` line (it lists every argument, so they tell releases apart) pick the release
    whose arguments they match best; those of `non-default args` the newest release that has them all; the
    release band its formats show (`band`), the band's oldest release, so that no flag it may lack is offered;
    anything else, the newest release known."""
    ordered = sorted(_releases(), key=release_key)
    if version and re.match(r"\d+\.\d+", version):
        earlier = [r for r in ordered if release_key(r) <= release_key(version)]
        chosen = earlier[-1] if earlier else ordered[0]
        return _release(chosen), f"vLLM {chosen}" + ("" if chosen == version else
                                                     f" (the release nearest the log's {version})")
    named = set(non_default) - _INTERNAL
    fitting = [r for r in ordered if release_key(r) >= release_key(FIRST_NON_DEFAULT_RELEASE) and named <= _dests(r)]
    if named and fitting:
        return _release(fitting[-1]), (f"vLLM {fitting[-1]} (the log names no version: the newest release that has "
                                       "every argument its non-default args name)")
    keys = set(namespace) - _INTERNAL
    if keys:
        upto = [r for r in ordered if release_key(r) <= release_key(LAST_NAMESPACE_RELEASE)]
        overlap = {r: len(keys & _dests(r)) / len(keys | _dests(r)) for r in upto}
        best = max(overlap.values())
        matching = [r for r in upto if overlap[r] == best]
        span = matching[0] + (f"-{matching[-1]}" if len(matching) > 1 else "")
        why = ("its Namespace lists exactly the arguments of "
               f"{'these releases' if len(matching) > 1 else 'this release'}"
               if best == 1.0 else "its Namespace matches this release's arguments best")
        return _release(matching[-1]), f"vLLM {span} (the log names no version; {why})"
    if band is not None and band in RELEASE_BAND_FIRST:
        first = RELEASE_BAND_FIRST[band]
        return _release(first), (f"vLLM {first} (the log names no version: the oldest release of {band}, the "
                                 "band its formats fit)")
    return _release(ordered[-1]), f"vLLM {ordered[-1]} (the log names no version: the newest release known)"


# Values of a flag the fixes offer that came later than the flag itself (the `choices` of vLLM's arg_utils.py):
# (flag, value) -> the first release that accepts it.
VALUE_SINCE: Mapping[tuple[str, str], str] = {("--kv-cache-dtype", "fp8"): "0.4.1", ("--quantization", "fp8"): "0.4.1"}


def fixes_the_release_has(fixes: Sequence[Fix], version: str | None, band: str | None) -> tuple[Fix, ...]:
    """The fixes whose flags (and values) the incident's release has: the log's version, else the oldest release
    of the band its formats show. A fix that release would refuse is dropped rather than offered; with neither
    figure, all are kept (the command check still names what the release it picks would refuse)."""
    if not (version and re.match(r"\d+\.\d+", version)) and band not in RELEASE_BAND_FIRST:
        return tuple(fixes)
    args, _ = argument_list(version, band=band)
    kept = []
    for fix in fixes:
        settings = {**({fix.flag: fix.value} if fix.flag else {}), **fix.also_set}
        if all(_release_accepts(args, flag, value) for flag, value in settings.items() if flag.startswith("--")):
            kept.append(fix)
    return tuple(kept)


def _release_accepts(args: ArgumentList, flag: str, value: Any) -> bool:
    since = VALUE_SINCE.get((flag, str(value)))
    return args.spec(flag) is not None and (since is None or release_key(args.release) >= release_key(since))


def known_releases() -> list[str]:
    return sorted(_releases(), key=release_key)


# --- reading the launch from the log --------------------------------------------------------------------

@dataclass(frozen=True)
class Setting:
    dest: str
    value: Any
    origin: str                 # "non-default args" | "args: Namespace" | "engine config"
    source: SourceRef


@dataclass(frozen=True)
class Launch:
    """What the log shows of how vLLM was started."""

    program: str
    model: str | None
    settings: Mapping[str, Setting]       # non-default settings by dest
    complete: bool                        # every non-default argument was printed
    not_recovered: tuple[str, ...]
    sources: tuple[SourceRef, ...]
    env: Mapping[str, Any] = dataclasses.field(default_factory=dict)   # environment variables the log shows set


class _Unparsed(str):
    """A value the log printed as an object repr (`LoadFormat.AUTO`, `<function ...>`): not a literal."""


def split_top(text: str, sep: str = ",") -> tuple[list[str], bool]:
    """Split at top-level separators, minding brackets and quotes; also whether the text ended balanced."""
    items, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>" and depth:
            depth -= 1
        elif ch == sep and depth == 0:
            items.append(text[start:i])
            start = i + 1
        i += 1
    items.append(text[start:])
    return [x.strip() for x in items if x.strip()], depth == 0 and not quote


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _Unparsed(text)


def _body(text: str, opening: str, closing: str) -> tuple[str, bool]:
    """What is inside the first `opening` ... matching `closing`, and whether the closing was found."""
    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return text[1:i], True
    return text[1:], False


def parse_mapping(text: str) -> tuple[dict[str, Any], bool]:
    """`{'model': 'x', 'max_model_len': 32768, ...}` -> dict; whether it was whole (not cut)."""
    body, closed = _body(text.strip(), "{", "}")
    items, balanced = split_top(body)
    out: dict[str, Any] = {}
    for item in items:
        key, colon, value = item.partition(":")
        key_value = _value(key.strip())
        if colon and isinstance(key_value, str) and not isinstance(key_value, _Unparsed):
            out[key_value] = _value(value.strip())
    return out, closed and balanced


def parse_keywords(text: str) -> tuple[dict[str, Any], bool]:
    """`host=None, port=8000, model='x'` (a Namespace body, or the engine config) -> dict; whether whole."""
    items, balanced = split_top(text.strip().removesuffix(")") if text.strip().endswith(")") and
                                text.count("(") < text.count(")") else text)
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_]\w*", key.strip()):
            out[key.strip()] = _value(value.strip())
    return out, balanced


def _is_default(value: Any, entry: Mapping[str, Any] | None) -> bool:
    if entry is not None and "default" in entry:
        return value == entry["default"] or (value in (None, False, [], "") and entry["default"] in (None, False))
    return value in (None, False, [], "", "auto")


def _secret(dest: str, value: Any) -> bool:
    if dest in SECRET_DESTS:
        return value not in (None, [], "")
    values = value if isinstance(value, list) else [value]
    return any(isinstance(v, str) and _MASKED.match(v) for v in values)


_ENGINE_CONFIG = {   # engine-config key -> flag dest, for the settings a resolved config shows
    "tokenizer": "tokenizer", "revision": "revision", "tokenizer_revision": "tokenizer_revision",
    "trust_remote_code": "trust_remote_code", "dtype": "dtype", "max_seq_len": "max_model_len",
    "download_dir": "download_dir", "load_format": "load_format", "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size", "data_parallel_size": "data_parallel_size",
    "quantization": "quantization", "enforce_eager": "enforce_eager", "kv_cache_dtype": "kv_cache_dtype",
    "served_model_name": "served_model_name", "disable_custom_all_reduce": "disable_custom_all_reduce",
}


def _engine_value(key: str, value: Any, model: str | None) -> Any:
    """A resolved engine-config value as the flag takes it; None when it is what vLLM picks by itself."""
    if isinstance(value, _Unparsed):
        text = str(value)
        value = text.split(".", 1)[1].lower() if text.startswith(("LoadFormat.", "torch.")) else text
    if key == "dtype" and value in ("bfloat16", "float16"):
        return None                                   # what --dtype auto resolves to for 16-bit checkpoints
    if key in ("tokenizer", "served_model_name") and (value == model or value in ([model], f"['{model}']")):
        return None
    return value


def read_launch(events: Sequence[LogEvent], args: ArgumentList) -> Launch:
    """The launch the log shows, from the last args line (or, failing one, the last engine config line)."""
    printed = [e for e in events if e.kind == "args" and e.fields.get("args_text")]
    configs = [e for e in events if e.kind == "engine_config" and e.fields.get("config_text")]
    model = next((e.fields["model"] for e in reversed(events)
                  if e.kind in ("args", "engine_config", "model_name", "version") and e.fields.get("model")), None)
    settings: dict[str, Setting] = {}
    missing: list[str] = []
    program = args.program
    complete = False
    sources: list[SourceRef] = []
    if printed:
        event = printed[-1]
        text = str(event.fields["args_text"])
        sources.append(event.source)
        if event.fields.get("args_style") == "non_default":
            values, complete = parse_mapping(text)
            origin = "non-default args"
            served = any(e.signature == "server_version" for e in events) or \
                str(event.process or "").startswith(("APIServer", "ApiServer"))
            if "model_tag" not in values and not served:
                program = OFFLINE                     # LLM(...) prints its EngineArgs the same way (0.10.1+)
        else:
            values, complete = parse_keywords(text)
            complete = complete and text.rstrip().endswith(")")      # a Namespace cut short lacks its ")"
            origin = "args: Namespace"
            if "model_tag" not in values and args.program == SERVE:
                program = API_SERVER                  # the OpenAI server's module, run without `vllm serve`
        model = values.get("model_tag") or values.get("model") or model
        if not complete:
            missing.append(f"the rest of the {origin} line (it is cut)")
        for dest, value in values.items():
            if dest in _INTERNAL:
                continue
            flag = args.flag_for(dest)
            entry = args.arguments.get(flag) if flag else None
            if origin == "args: Namespace" and _is_default(value, entry):
                continue
            if _secret(dest, value):
                missing.append(f"--{dest.replace('_', '-')} (a secret the log hides: add your own)")
            elif isinstance(value, _Unparsed) or (isinstance(value, list)
                                                  and any(isinstance(v, _Unparsed) for v in value)):
                missing.append(f"--{dest.replace('_', '-')} (printed as an object, not a value)")
            elif flag is None and program != OFFLINE:
                missing.append(f"{dest} (not a flag of vLLM {args.release})")
            elif value is not None:
                settings[dest] = Setting(dest, value, origin, event.source)
    elif configs:
        event = configs[-1]
        sources.append(event.source)
        values, _ = parse_keywords(str(event.fields["config_text"]))
        model = values.get("model", model) if not isinstance(values.get("model"), _Unparsed) else model
        for key, dest in _ENGINE_CONFIG.items():
            if key not in values:
                continue
            value = _engine_value(key, values[key], model if isinstance(model, str) else None)
            flag = args.flag_for(dest)
            if flag is None or value is None or _is_default(value, args.arguments.get(flag)):
                continue
            settings[dest] = Setting(dest, value, "engine config", event.source)
        missing.append("the flags the log does not print (it shows the engine config, not the command)")
    else:
        missing.append("the launch command: the log prints neither its arguments nor the engine config")
    env = _environment(events, settings, complete, missing, sources)
    return Launch(program, model if isinstance(model, str) else None, settings, complete, tuple(missing),
                  tuple(sources), env)


def _environment(events: Sequence[LogEvent], settings: Mapping[str, Setting], complete: bool, missing: list[str],
                 sources: list[SourceRef]) -> dict[str, Any]:
    """Environment variables the log shows in force. The CPU backend's KV cache "Explicitly set (N/T) GiB" comes
    from --kv-cache-memory-bytes or VLLM_CPU_KVCACHE_SPACE (whole GiB): with the whole args line and no such flag
    in it, it was the variable."""
    explicit = [e for e in events if e.signature == "cpu_kv_cache_set" and e.fields.get("kv_mode") == "Explicitly"
                and isinstance(e.fields.get("kv_cache_gib"), (int, float))]
    if not explicit or "kv_cache_memory_bytes" in settings:
        return {}
    gib = explicit[-1].fields["kv_cache_gib"]
    if complete and float(gib).is_integer():
        sources.append(explicit[-1].source)
        return {"VLLM_CPU_KVCACHE_SPACE": int(gib)}
    missing.append(f"the KV cache size set explicitly ({gib:g} GiB): by VLLM_CPU_KVCACHE_SPACE or "
                   "--kv-cache-memory-bytes, the log does not say which")
    return {}


# --- writing the command -------------------------------------------------------------------------------

def _shell(value: Any) -> str:
    if isinstance(value, (dict, list)) and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        import json
        return shlex.quote(json.dumps(value, separators=(", ", ": ")))
    return shlex.quote(str(value))


def _flag_words(flag: str, entry: Mapping[str, Any], value: Any) -> list[str] | None:
    """The words that set `value` for `flag`; None when this release cannot express it."""
    if entry.get("value") is False:                  # a switch
        if value is True:
            return [flag]
        if value is False:
            return [f"--no-{flag[2:]}"] if entry.get("negatable") else None
        return None
    if entry.get("many") and isinstance(value, list):
        return [flag, *(_shell(v) for v in value)] if value else []
    return [flag, _shell(value)]


def _env_var(name: str | None) -> bool:
    return bool(name) and re.fullmatch(r"[A-Z][A-Z0-9_]+", name or "") is not None


def _changes(fix: Fix) -> dict[str, Any]:
    """Flag (or environment variable) -> value the fix sets."""
    return {fix.flag: fix.value, **dict(fix.also_set)} if fix.flag else dict(fix.also_set)


def build_command(launch: Launch, fix: Fix, args: ArgumentList, fix_index: int) -> LaunchCommand | None:
    """The incident's launch with `fix` applied; None when this release has no such flag."""
    changes = _changes(fix)
    env = {k: v for k, v in changes.items() if _env_var(k)}
    flags = {k: v for k, v in changes.items() if not _env_var(k)}
    set_dests: dict[str, Any] = {}
    for flag, value in flags.items():
        found = args.spec(flag)
        if found is None:
            return None
        set_dests[found[1]["dest"]] = value
    kept = {dest: s for dest, s in launch.settings.items() if dest not in set_dests}
    kept_env = {k: v for k, v in launch.env.items() if k not in env}
    env_words = [f"{k}={shlex.quote(str(v))}" for k, v in {**kept_env, **env}.items()]
    changed = tuple([f"{k}={v}" for k, v in env.items()] + list(flags))
    complete = launch.complete and launch.model is not None
    if launch.program == OFFLINE:
        if any(args.flag_for(d) is None for d in set_dests):
            return None
        names = tuple(kept)
        parts = [f"model={launch.model!r}"] + [f"{d}={s.value!r}" for d, s in kept.items()] + \
            [f"{d}={v!r}" for d, v in set_dests.items()]
        text = " ".join(env_words + [f"LLM({', '.join(parts)})"])
    else:
        words: list[str] = []
        for dest, value in [*((d, s.value) for d, s in kept.items()), *set_dests.items()]:
            known = args.flag_for(dest)
            phrase = _flag_words(known, args.arguments[known], value) if known else None
            if phrase is None:
                if dest in set_dests:
                    return None
                continue
            words.extend(phrase)
        names = tuple(f"--{d.replace('_', '-')}" for d in kept)
        if complete:
            model = shlex.quote(launch.model or "")
            head = launch.program.split() + ([model] if launch.program == SERVE else ["--model", model])
            text = " ".join(env_words + head + words)
        else:                       # only what the fix sets: the rest of the command is the user's own
            own = [w for d, v in set_dests.items()
                   for w in _flag_words(args.flag_for(d) or "", args.arguments.get(args.flag_for(d) or "", {}), v)
                   or []]
            text = " ".join([f"{k}={shlex.quote(str(v))}" for k, v in env.items()] + own)
    kept_names = tuple(f"{k}={v}" for k, v in kept_env.items()) + names
    return LaunchCommand(text=text, complete=complete, fix_index=fix_index, changed=changed, kept=kept_names,
                         not_recovered=launch.not_recovered, vllm_version=args.release, program=launch.program,
                         source=launch.sources)


def headline_command(fixes: Sequence[Fix], events: Iterable[LogEvent], version: str | None,
                     band: str | None = None) -> LaunchCommand | None:
    """The first checked flag fix applied to the incident's own launch; None when no checked fix sets a flag
    this release has."""
    if not any(f.status == "checked" and f.value is not None and (f.flag or f.also_set) for f in fixes):
        return None                                   # nothing to paste: the argument lists stay unread
    events = list(events)
    printed = [e for e in events if e.kind == "args" and e.fields.get("args_text")]
    keys: dict[str, Any] = {}
    named: dict[str, Any] = {}
    if printed and printed[-1].fields.get("args_style") == "non_default":
        named = parse_mapping(str(printed[-1].fields["args_text"]))[0]
    elif printed:
        keys = parse_keywords(str(printed[-1].fields["args_text"]))[0]
    args, basis = argument_list(version, keys, named, band)
    launch = read_launch(events, args)
    for index, fix in enumerate(fixes, 1):
        if fix.status != "checked" or fix.value is None or not (fix.flag or fix.also_set):
            continue
        built = build_command(launch, fix, args, index)
        if built is not None:
            return dataclasses.replace(built, release_basis=basis)
    return None


# --- checking a command as the release's parser would -------------------------------------------------

def check_command(text: str, args: ArgumentList, complete: bool = True) -> list[str]:
    """What vLLM's parser for this release would refuse in `text` (an empty list when it parses): an unknown
    flag, a switch given a value, a flag missing its value, a stray positional."""
    words = shlex.split(text)
    while words and re.fullmatch(r"[A-Z][A-Z0-9_]*=.*", words[0]):
        words.pop(0)
    if words and words[0].startswith("LLM("):
        keywords, whole = parse_keywords(" ".join(words)[len("LLM("):])
        return ([] if whole else ["LLM(...) is cut"]) + [f"LLM() has no argument {k!r} in vLLM {args.release}"
                                                         for k in keywords if k != "model" and k not in args.by_dest]
    problems = []
    if complete:
        module = API_SERVER.split()
        if words[:2] == ["vllm", "serve"] and args.program == SERVE:
            words = words[2:]
            if words and not words[0].startswith("-"):
                words = words[1:]                      # the model, positional
        elif words[:len(module)] == module:
            words = words[len(module):]
        else:
            return [f"does not start with {args.program!r} or {API_SERVER!r}"]
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            problems.append(f"stray value {word!r}")
            i += 1
            continue
        flag, eq, inline = word.partition("=")
        found = args.spec(flag)
        if found is None:
            problems.append(f"{flag} is not an argument of vLLM {args.release}")
            i += 1
            continue
        entry = found[1]
        takes = entry.get("value") is not False
        if not takes:
            if eq:
                problems.append(f"{flag} is a switch and takes no value")
            i += 1
            continue
        if eq:
            i += 1
            continue
        values = 0
        i += 1
        while i < len(words) and (not words[i].startswith("-") or re.fullmatch(r"-\d[\d.]*", words[i])):
            values += 1
            i += 1
            if not entry.get("many"):
                break
        if values == 0 and not entry.get("optional_value"):
            problems.append(f"{flag} needs a value")
    return problems
