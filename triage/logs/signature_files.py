"""Signature files: reading and validating the data that says which log lines matter and which figures to pull out.

Each signature is a literal `anchor` (a cheap prefilter every match contains), a `regex` searched in
the message, typed `fields`, and `samples`: whole raw lines it must match (the tests run them all).
A signature may also say which startup phase its line belongs to, or that it states a failure.
Every mistake in a file is a RuleError that names the file, the key and a hint. Matching lives in
signatures.py, the whole-line forms of the stats lines in stats_shapes.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import regex

from .. import tomlread
from ..bundled import bundled_dir
from ..errors import RuleError, did_you_mean
from ..vocabulary import EVENT_KINDS, FAILURE_KINDS, PHASES, RELEASE_BANDS
from .phases import FunctionPhase, function_table, parse_functions

_SIZE_UNITS = {"bytes": 1 / 2**30, "b": 1 / 2**30, "kib": 1 / 2**20, "mib": 1 / 2**10, "gib": 1.0, "tib": 1024.0,
               "kb": 1 / 2**20, "mb": 1 / 2**10, "gb": 1.0}


# Every figure is range-checked where it enters: a mangled or hostile number is unknown (ValueError),
# never an infinity, a NaN or a 400-digit integer for the arithmetic downstream.
MAX_COUNT = 10**15          # tokens, blocks, requests, preemptions: far above anything real
MAX_GIB = 1e7               # ten PiB
MAX_RATIO = 1e4             # a percentage of 1,000,000 %


def _checked(value: float, limit: float) -> float:
    if not math.isfinite(value) or abs(value) > limit:
        raise ValueError(f"{value!r} is out of range")
    return value


def _to_int(text: str) -> int:
    digits = text.replace(",", "").replace("_", "").strip()
    if len(digits.lstrip("+-")) > 16:            # int() of 5,000 digits is slow and always out of range
        raise ValueError("too many digits")
    return int(_checked(int(digits), MAX_COUNT))


def _to_float(text: str) -> float:
    return _checked(float(text.replace(",", "")), MAX_COUNT)


def _to_size_gib(text: str) -> float:
    """'896.00 MiB' -> 0.875. vLLM's and torch's 'GB' are computed with 2**30, so GB counts as GiB."""
    number, _, unit = text.strip().partition(" ")
    unit = unit.strip().lower() or "gib"
    if unit not in _SIZE_UNITS:
        raise ValueError(f"unknown size unit {unit!r}")
    return _checked(_checked(float(number.replace(",", "")), MAX_COUNT * 2**30) * _SIZE_UNITS[unit], MAX_GIB)


_XLA_UNITS = {"B": 1 / 2**30, "K": 1 / 2**20, "M": 1 / 2**10, "G": 1.0, "T": 1024.0}


def _to_xla_size_gib(text: str) -> float:
    """'17.29G' -> 17.29, '1.7K', '0B': XLA writes sizes with a one-letter binary unit and no space."""
    text = text.strip()
    if text.endswith("B") and text[-2:-1] in _XLA_UNITS and text[-2:-1] != "B":
        text = text[:-1]                            # '17.29GB'
    unit = text[-1:]
    if unit not in _XLA_UNITS:
        return _checked(float(text) / 2**30, MAX_GIB)   # bare bytes
    return _checked(float(text[:-1]) * _XLA_UNITS[unit], MAX_GIB)


def _to_percent(text: str) -> float:
    return _checked(float(text.rstrip("%").replace(",", "")) / 100.0, MAX_RATIO)


def _to_bool(text: str) -> bool:
    return text.strip().lower() in ("true", "1", "yes")


def _to_str(text: str) -> str:
    return text.strip().strip("'\"")


def _to_text(text: str) -> str:
    return text


FIELD_TYPES: Mapping[str, Callable[[str], Any]] = {
    "int": _to_int, "float": _to_float, "size_gib": _to_size_gib, "percent": _to_percent,
    "bool": _to_bool, "str": _to_str, "text": _to_text,      # text: kept as written (a whole args line)
    "xla_size": _to_xla_size_gib,
}
_SIGNATURE_KEYS = {"id", "kind", "anchor", "regex", "fields", "sets", "phase", "phase_done", "failure",
                   "samples", "also", "catch_all", "generic", "bulk", "versions", "note", "source", "bands"}


FieldPlan = tuple[tuple[str, Callable[[str], Any], bool], ...]     # (field, converter, collects every capture)


@dataclass(frozen=True, slots=True)
class Signature:
    id: str
    kind: str
    anchor: str
    regex: str                        # the `regex` pattern's text (the SignatureSet holding it compiles it)
    fields: Mapping[str, str]         # field name -> type name ("size_gib[]" collects every capture)
    sets: Mapping[str, Any]           # constant fields every match carries (e.g. engine = "v1")
    phase: str | None
    phase_done: bool
    failure: str | None
    catch_all: bool                   # only counts when no other signature matched the line
    generic: bool                     # matches outside vLLM too: alone it does not make input vLLM output
    bulk: bool                        # request traffic: counted, never parsed (see scan.py)
    samples: tuple[str, ...]
    also: tuple[str, ...]
    versions: str
    source: str                       # where the text comes from: vLLM's file and function, or the library's
    bands: Mapping[str, str]          # release band (vocabulary.RELEASE_BANDS) -> a line as that band prints it;
                                      # `samples` holds them first, the newest band's (the most figures) leading
    origin: str                       # file it came from, for messages
    plan: FieldPlan = ()

    def sample_keys(self) -> tuple[str, ...]:
        """Where each of `samples` is written in the signature's file: `bands.v1`, ..., then `samples[i]`."""
        bands = [f"bands.{band}" for band in _NEWEST_FIRST if band in self.bands]
        return (*bands, *(f"samples[{i}]" for i in range(len(self.samples) - len(bands))))

    def fields_of(self, m: Any, plan: FieldPlan | None = None) -> dict[str, Any]:
        """The typed fields of a match that has this signature's named groups (converted by `plan`, or else
        the signature's own)."""
        out: dict[str, Any] = dict(self.sets)
        groups = m.groupdict()
        for name, convert, many in self.plan if plan is None else plan:
            try:
                if many:
                    values = [convert(raw) for raw in m.captures(name) if raw]
                    if values:
                        out[name] = values
                    continue
                raw = groups[name]
                if raw:
                    out[name] = convert(raw)
            except (ValueError, OverflowError):
                continue  # a mangled number is unknown, not zero
        return out


def default_signature_dir() -> Path:
    return bundled_dir("triage.rules_data") / "signatures"


@dataclass(frozen=True)
class SignatureFiles:
    """What a signatures directory holds, validated."""

    signatures: tuple[Signature, ...]           # in file order, files by name
    functions: Mapping[str, FunctionPhase]      # the `[[function]]` rows by name
    patterns: Mapping[str, Any]                 # signature id -> compiled regex, where compiled while reading


def read_signature_files(directory: Path, compile_now: bool) -> SignatureFiles:
    """Read and validate every `*.toml` in `directory`; with `compile_now`, every regex is compiled and checked
    too (else the SignatureSet compiles each when first searched, with the same checks)."""
    files = sorted(Path(directory).glob("*.toml"))
    if not files:
        raise RuleError(str(directory), "signatures", "no *.toml signature files found",
                        "point --rules at a directory holding signatures/*.toml")
    sigs: list[Signature] = []
    seen: dict[str, str] = {}
    functions: list[tuple[str, FunctionPhase]] = []
    patterns: dict[str, Any] | None = {} if compile_now else None
    for path in files:
        in_file, rows = _load_file(path, patterns)
        functions.extend((str(path), row) for row in rows)
        for sig in in_file:
            if sig.id in seen:
                raise RuleError(str(path), f"signature {sig.id}.id", f"duplicate id (also in {seen[sig.id]})",
                                "give each signature a unique id")
            seen[sig.id] = str(path)
            sigs.append(sig)
    for sig in sigs:
        for other in sig.also:
            if other not in seen:
                raise RuleError(sig.origin, f"signature {sig.id}.also", f"unknown signature {other!r}",
                                did_you_mean(other, seen))
    return SignatureFiles(tuple(sigs), function_table(functions), patterns or {})


def _load_file(path: Path, patterns: dict[str, Any] | None) -> tuple[list[Signature], list[FunctionPhase]]:
    try:
        data = tomlread.loads(path.read_text(encoding="utf-8"))
    except tomlread.TOMLDecodeError as exc:
        raise RuleError(str(path), "(file)", f"not valid TOML: {exc}",
                        "check quoting; regexes go in '''literal''' strings") from None
    except RecursionError:
        raise RuleError(str(path), "(file)", "nested too deeply to read",
                        "a signature file is [[signature]] tables") from None
    unknown = set(data) - {"signature", "function"}
    if unknown:
        raise RuleError(str(path), sorted(unknown)[0], "unknown top-level key",
                        "a signature file holds [[signature]] and [[function]] tables only")
    entries = data.get("signature", [])
    if not isinstance(entries, list):
        raise RuleError(str(path), "signature", "must be an array of tables", "write [[signature]]")
    return ([_parse_signature(path, i, entry, patterns) for i, entry in enumerate(entries)],
            parse_functions(str(path), data.get("function", [])))


def compile_regex(where: str, ident: str, text: str, fields: Iterable[str]) -> Any:
    """`text` compiled with `regex`, with a group for each field; else a RuleError naming file and key."""
    key = f"signature {ident}"
    try:
        pattern = regex.compile(text)
    except regex.error as exc:
        at = getattr(exc, "pos", None)
        pos = f" at position {at}" if at is not None else ""
        raise RuleError(where, f"{key}.regex",
                        f"bad regular expression{pos}: {exc.msg if hasattr(exc, 'msg') else exc}",
                        "regexes use Python `regex` syntax; write them in '''literal''' strings") from None
    for fname in fields:
        if fname not in pattern.groupindex:
            raise RuleError(where, f"{key}.fields.{fname}", "the regex has no group of that name",
                            f"add (?P<{fname}>...) to the regex")
    return pattern


_REQUIRED_HINTS = {
    "source": 'where the text is made, e.g. source = "vllm/v1/core/kv_cache_utils.py: check_enough_kv_cache_memory"',
    "bands": "a [signature.bands] table: v0-old, v0-late, v1 = a line as that band prints it",
}
_NEWEST_FIRST = tuple(RELEASE_BANDS)[::-1]


def _parse_signature(path: Path, index: int, entry: Any, patterns: dict[str, Any] | None) -> Signature:
    """One `[[signature]]` table, checked key by key (its regex compiled into `patterns` where they are kept)."""
    where = str(path)
    if not isinstance(entry, dict):
        raise RuleError(where, f"signature[{index}]", "must be a table")
    ident = entry.get("id")
    key = f"signature {ident}" if isinstance(ident, str) else f"signature[{index}]"
    for name in entry:
        if name not in _SIGNATURE_KEYS:
            raise RuleError(where, f"{key}.{name}", "unknown key", did_you_mean(name, _SIGNATURE_KEYS)
                            or f"known keys: {', '.join(sorted(_SIGNATURE_KEYS))}")
    for required in ("id", "kind", "anchor", "regex", "source", "bands"):
        if required not in entry:
            raise RuleError(where, f"{key}.{required}", "missing required key", _REQUIRED_HINTS.get(required, ""))
    for name in ("id", "kind", "anchor", "regex", "source"):
        if not isinstance(entry[name], str) or not entry[name]:
            raise RuleError(where, f"{key}.{name}", "must be a non-empty string")
    fields = entry.get("fields", {})
    if not isinstance(fields, dict):
        raise RuleError(where, f"{key}.fields", "must be a table of name = type")
    for fname, ftype in fields.items():
        if not isinstance(ftype, str) or ftype.removesuffix("[]") not in FIELD_TYPES:
            raise RuleError(where, f"{key}.fields.{fname}", f"unknown type {ftype!r}",
                            f"one of {', '.join(sorted(FIELD_TYPES))}")
    if patterns is not None:
        patterns[entry["id"]] = compile_regex(where, entry["id"], entry["regex"], fields)
    if entry["kind"] not in EVENT_KINDS:
        raise RuleError(where, f"{key}.kind", f"unknown event kind {entry['kind']!r}",
                        did_you_mean(entry["kind"], EVENT_KINDS)
                        or "the kinds the code reads are EVENT_KINDS in triage/vocabulary.py")
    failure = entry.get("failure")
    if failure is not None and (not isinstance(failure, str) or failure not in FAILURE_KINDS):
        raise RuleError(where, f"{key}.failure", f"unknown failure kind {failure!r}",
                        did_you_mean(str(failure), FAILURE_KINDS) or f"one of {', '.join(sorted(FAILURE_KINDS))}")
    sets = entry.get("sets", {})
    if not isinstance(sets, dict):
        raise RuleError(where, f"{key}.sets", "must be a table of name = constant value")
    phase = entry.get("phase")
    if phase is not None and phase not in PHASES:
        raise RuleError(where, f"{key}.phase", f"unknown phase {phase!r}", f"one of {', '.join(PHASES)}")
    bands = entry["bands"]
    if not isinstance(bands, dict) or not bands:
        raise RuleError(where, f"{key}.bands", "must be a table of release band = sample line",
                        f"the bands are {', '.join(RELEASE_BANDS)}")
    for band, line in bands.items():
        if band not in RELEASE_BANDS:
            raise RuleError(where, f"{key}.bands.{band}", f"unknown release band {band!r}",
                            did_you_mean(band, RELEASE_BANDS) or f"one of {', '.join(RELEASE_BANDS)}")
        if not isinstance(line, str) or entry["anchor"] not in line:
            raise RuleError(where, f"{key}.bands.{band}", f"must be a line holding the anchor {entry['anchor']!r}",
                            "the line as vLLM of that band prints it")
    samples = entry.get("samples", [])
    if not isinstance(samples, list) or not all(isinstance(s, str) for s in samples):
        raise RuleError(where, f"{key}.samples", "must be a list of sample lines",
                        "more lines it must match besides one per band (other wordings, wrappers)")
    for i, sample in enumerate(samples):
        if entry["anchor"] not in sample:
            raise RuleError(where, f"{key}.samples[{i}]", f"does not contain the anchor {entry['anchor']!r}",
                            "the anchor must be a literal part of every line the signature matches")
    for flag in ("phase_done", "catch_all", "generic", "bulk"):
        if flag in entry and not isinstance(entry[flag], bool):
            raise RuleError(where, f"{key}.{flag}", "must be true or false")
    also = entry.get("also", [])
    if not isinstance(also, list):
        raise RuleError(where, f"{key}.also", "must be a list of signature ids")
    return Signature(
        id=entry["id"], kind=entry["kind"], anchor=entry["anchor"], regex=entry["regex"],
        fields=dict(fields), sets=dict(sets),
        phase=phase, phase_done=bool(entry.get("phase_done", False)), failure=failure,
        catch_all=bool(entry.get("catch_all", False)),
        generic=bool(entry.get("generic", False)), bulk=bool(entry.get("bulk", False)),
        samples=(*(bands[b] for b in _NEWEST_FIRST if b in bands), *samples), also=tuple(also),
        versions=str(entry.get("versions", "")), source=entry["source"], bands=dict(bands), origin=where,
        plan=tuple((name, FIELD_TYPES[kind.removesuffix("[]")], kind.endswith("[]")) for name, kind in fields.items()))


def repeats_a_varying_group(pattern: str) -> bool:
    """Whether `pattern` repeats, without bound, a group that can split one text many ways: one that ends in a part
    of varying length (`(a+)+`, `(\\w+\\s?)*`) or whose alternatives can start alike (`(x|xx)+`). On a line it
    almost matches, such a pattern can take exponential time. `(?:\\w+ )*` passes: a fixed character ends each
    repeat. A plain scan of the pattern's text, cautious rather than exact: `vtriage rules` warns of a user's
    signature it flags (and every search is cut off after signatures.MATCH_TIMEOUT_S in any case)."""
    groups = [_Group()]         # the pattern itself, then each group open where the scan is
    at = 0
    while at < len(pattern):
        char = pattern[at]
        group = groups[-1]
        repeat, end = _repeat_at(pattern, at)
        if repeat:
            group.repeated(varying=repeat != "fixed")
            at = end
        elif char == "\\":
            group.part(pattern[at + 1:at + 2] if not pattern[at + 1:at + 2].isalnum() else None)
            at += 2
        elif char == "[":
            group.part(None)
            at = _class_end(pattern, at)
        elif char == "(":
            group.part(None)
            groups.append(_Group())
            at = _group_body(pattern, at)
        elif char == ")" and len(groups) > 1:
            inner = groups.pop()
            repeat, at = _repeat_at(pattern, at + 1)
            if repeat == "unbounded" and inner.splits_many_ways():
                return True
            groups[-1].ends_varying = inner.splits_many_ways() or repeat in ("bounded", "unbounded")
        elif char == "|":
            group.alternative()
            at += 1
        else:
            group.part(None if char in ".^$" else char)
            at += 1
    return False


class _Group:
    """What `repeats_a_varying_group` has seen of a group so far: each alternative's leading literal text, and
    whether an alternative ends in a part of varying length."""

    def __init__(self) -> None:
        self.leads = [""]               # each alternative's literal text up to its first other part
        self.lead_open = True           # the last alternative's lead may grow
        self.ends_varying = False       # the last alternative's last part so far matches texts of varying length
        self.an_alternative_varies = False

    def part(self, literal: str | None) -> None:
        """The next part of the last alternative: a literal character, or None for any other."""
        if literal is not None and self.lead_open:
            self.leads[-1] += literal
        else:
            self.lead_open = False
        self.ends_varying = False

    def repeated(self, varying: bool) -> None:
        """The last part is repeated: it is not fixed text, so no lead runs past it."""
        if self.lead_open and self.leads[-1]:
            self.leads[-1] = self.leads[-1][:-1]
        self.lead_open = False
        self.ends_varying = varying

    def alternative(self) -> None:
        self.an_alternative_varies = self.an_alternative_varies or self.ends_varying
        self.leads.append("")
        self.lead_open = True
        self.ends_varying = False

    def splits_many_ways(self) -> bool:
        if self.an_alternative_varies or self.ends_varying:
            return True
        if len(self.leads) == 1:
            return False
        return any(a.startswith(b) for i, a in enumerate(self.leads) for j, b in enumerate(self.leads) if i != j)


def _class_end(pattern: str, at: int) -> int:
    """Where the character class that starts at `at` (a `[`) ends: one past its `]`."""
    at += 1
    if pattern[at:at + 1] == "^":
        at += 1
    if pattern[at:at + 1] == "]":       # a `]` first is a literal one
        at += 1
    while at < len(pattern) and pattern[at] != "]":
        at += 2 if pattern[at] == "\\" else 1
    return at + 1


def _group_body(pattern: str, at: int) -> int:
    """Where the body of the group that opens at `at` starts: past `(`, `(?:`, `(?P<name>`, `(?<=` and the like."""
    if pattern[at + 1:at + 2] != "?":
        return at + 1
    if pattern[at + 2:at + 4] in ("<=", "<!"):
        return at + 4
    if pattern[at + 2:at + 4] == "P<" or pattern[at + 2:at + 3] == "<":
        return pattern.find(">", at) + 1 or len(pattern)
    return at + 3


def _repeat_at(pattern: str, at: int) -> tuple[str, int]:
    """The repeat that starts at `at`: "unbounded" (`*`, `+`, `{2,}`), "bounded" (`?`, `{1,3}`), "fixed" (`{3}`),
    or "" where none does; and where what follows it starts (past a lazy or possessive mark)."""
    char = pattern[at:at + 1]
    if char in ("*", "+"):
        repeat, end = "unbounded", at + 1
    elif char == "?":
        repeat, end = "bounded", at + 1
    elif char == "{" and (close := pattern.find("}", at)) != -1 and _is_count(pattern[at + 1:close]):
        low, comma, high = pattern[at + 1:close].partition(",")
        repeat = "fixed" if not comma or low.strip() == high.strip() else "bounded" if high.strip() else "unbounded"
        end = close + 1
    else:
        return "", at
    if pattern[end:end + 1] in ("?", "+"):
        end += 1
    return repeat, end


def _is_count(text: str) -> bool:
    """Whether the text between `{` and `}` makes a repeat (`3`, `1,3`, `2,`) rather than literal braces."""
    low, _, high = text.partition(",")
    return low.strip().isdigit() and (not high.strip() or high.strip().isdigit())
