"""Log signatures: data files that say which lines matter and which figures to pull out of them.

Each signature is a literal `anchor` (a cheap prefilter every match contains), a `regex` searched in
the message, typed `fields`, and `samples`: whole raw lines it must match (the tests run them all).
A signature may also say which startup phase its line belongs to, or that it states a failure.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import regex

try:        # Aho-Corasick in Rust: all anchors of a line in one pass, several times faster than the trie
    import ahocorasick_rs
except ImportError:         # no wheel for this platform: the regex trie below finds the same anchors
    ahocorasick_rs = None  # type: ignore[assignment]  # checked before use

from .. import tomlread
from ..bundled import bundled_dir
from ..errors import RuleError, did_you_mean
from ..sources.scan import BulkPattern, QuietLines, bulk_pattern, quiet_lines_possible
from ..vocabulary import EVENT_KINDS, FAILURE_KINDS, PHASES, RELEASE_BANDS, STATS_PEAKS
from .envelope import QUIET_HEAD, QUIET_STOPS, STATS_PREFIX
from .phases import FunctionPhase, function_table, parse_functions

MATCH_TIMEOUT_S = 0.25      # a pathological user regex must not hang the tool: each search gets this long
SLOW_BUDGET_S = 5.0         # per input: once timeouts have cost this much, patterns that timed out are skipped

_SIZE_UNITS = {"bytes": 1 / 2**30, "b": 1 / 2**30, "kib": 1 / 2**20, "mib": 1 / 2**10, "gib": 1.0, "tib": 1024.0,
               "kb": 1 / 2**20, "mb": 1 / 2**10, "gb": 1.0}


# Every figure is range-checked where it enters: a mangled or hostile number is unknown (ValueError),
# never an infinity, a NaN or a 400-digit integer for the arithmetic downstream.
MAX_COUNT = 10**15          # tokens, blocks, requests, preemptions: far above anything real
MAX_GIB = 1e7               # ten PiB
MAX_RATIO = 1e4             # a percentage of 1,000,000 %
MAX_VALUES_KEPT = 65536     # answers kept per converter (StatsLineShape.summed_plan; a stats log's values repeat)
_DIGITS = "0123456789"


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


@dataclass(frozen=True, slots=True)
class Signature:
    id: str
    kind: str
    anchor: str
    regex: str                        # the `regex` pattern's text (compiled once, on first use: `pattern`)
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
    plan: tuple[tuple[str, Callable[[str], Any], bool], ...] = ()   # (field, converter, collects every capture)

    def sample_keys(self) -> tuple[str, ...]:
        """Where each of `samples` is written in the signature's file: `bands.v1`, ..., then `samples[i]`."""
        bands = [f"bands.{band}" for band in _NEWEST_FIRST if band in self.bands]
        return (*bands, *(f"samples[{i}]" for i in range(len(self.samples) - len(bands))))

    @property
    def pattern(self) -> Any:
        """The compiled pattern. Compiled when first searched: a short log meets a few of the 134 signatures,
        and compiling them all takes 50 ms of a 0.25 s run."""
        return _compiled(self.origin, self.id, self.regex, tuple(self.fields))

    def extract(self, message: str, budget: MatchBudget | None = None) -> tuple[dict[str, Any], tuple[int, int]] | None:
        """Search `message`; return typed fields and the matched span, or None (a search that takes
        longer than MATCH_TIMEOUT_S is given up and charged to `budget`)."""
        try:
            m = self.pattern.search(message, timeout=MATCH_TIMEOUT_S)
        except TimeoutError:
            if budget is not None:
                budget.timed_out(self.id)
            return None
        if m is None:
            return None
        return self.fields_of(m), m.span()

    def fields_of(self, m: Any, plan: tuple[tuple[str, Callable[[str], Any], bool], ...] | None = None
                  ) -> dict[str, Any]:
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


@dataclass
class MatchBudget:
    """What slow patterns may cost one input: each search has MATCH_TIMEOUT_S; once timeouts have
    taken SLOW_BUDGET_S in all, the patterns that timed out are no longer tried on it. The lines a
    slow pattern was given up on, or skipped for, are counted for a warning."""

    left_s: float = SLOW_BUDGET_S
    slow: set[str] = field(default_factory=set)       # ids of the signatures that timed out
    lines_skipped: int = 0
    _line_slow: bool = False

    def timed_out(self, signature_id: str) -> None:
        self.left_s -= MATCH_TIMEOUT_S
        self.slow.add(signature_id)
        self._line_slow = True

    def skips(self, signature_id: str) -> bool:
        if self.left_s <= 0 and signature_id in self.slow:
            self._line_slow = True
            return True
        return False

    def end_line(self) -> None:
        if self._line_slow:
            self.lines_skipped += 1
            self._line_slow = False

    def warning(self, name: str) -> str | None:
        if not self.lines_skipped:
            return None
        return (f"{name}: {self.lines_skipped:,} line(s) skipped: pattern too slow (signature "
                f"{', '.join(sorted(self.slow))}; each search is given {MATCH_TIMEOUT_S:g} s)")


class SignatureSet:
    """All signatures, with a prefilter so most lines cost one search."""

    def __init__(self, signatures: Iterable[Signature], functions: Mapping[str, FunctionPhase] | None = None) -> None:
        self.signatures: tuple[Signature, ...] = tuple(signatures)
        self.functions: Mapping[str, FunctionPhase] = functions or {}     # vLLM's functions and their phases
        self.by_id = {s.id: s for s in self.signatures}
        self._order = {s.id: i for i, s in enumerate(self.signatures)}
        anchors: dict[str, list[Signature]] = {}
        for sig in self.signatures:
            anchors.setdefault(sig.anchor, []).append(sig)
        self._by_anchor = anchors
        # Longest first so overlapping anchors are all tried; the prefilter only says "maybe".
        # What the block scanner sets aside (see scan.py), JSON-escaped forms included.
        # What the block scanner blanks out (see scan.py): vLLM's own request lines, then generic
        # ones (uvicorn access lines), counted apart because only the first prove the log is vLLM's.
        self.bulk_anchors: tuple[tuple[bytes, ...], ...] = tuple(
            tuple(sorted({a for s in group for a in (s.anchor.encode(), _escaped(s.anchor))}))
            for group in ([s for s in self.signatures if s.bulk and not s.generic],
                          [s for s in self.signatures if s.bulk and s.generic]) if group)
        self.bulk_patterns: tuple[BulkPattern, ...] = tuple(bulk_pattern(group) for group in self.bulk_anchors)
        self.bulk_vllm_patterns = 1 if any(s.bulk and not s.generic for s in self.signatures) else 0
        self._anchor_list = list(anchors)
        # DEBUG and INFO lines holding no anchor: counted, never parsed (see scan.QuietLines)
        self.quiet: QuietLines | None = QuietLines(re.compile(QUIET_HEAD), tuple(
            sorted({*QUIET_STOPS, *(a.encode() for a in anchors)}))) if quiet_lines_possible() and anchors else None
        self._automaton = ahocorasick_rs.AhoCorasick(self._anchor_list) if ahocorasick_rs and anchors else None
        # Anchors holding a digit: whether one occurs in a line depends on its digits, not only on its digit form
        # (logs/statsrun.py answers the rest once per form).
        self.digit_anchors = tuple(a for a in self._anchor_list if any(c in _DIGITS for c in a))
        self._shapes = _line_shapes(self)
        # the same shapes as whole lines, for runs of stats lines read in one match a line (logs/statsrun.py)
        self.stats_lines: tuple[StatsLineShape, ...] = tuple(
            StatsLineShape(re.compile(STATS_PREFIX + shape.pattern, re.ASCII), sig, trailing, fields_of)
            for shapes in self._shapes.values() for shape, sig, trailing, fields_of in shapes)

    def frame_phases(self, signature: str, fields: Mapping[str, Any]) -> tuple[str, ...]:
        """The phases a traceback frame's function runs in, the one it belongs to first: its signature's own
        phase (a frame told apart by its path), else the function table's row; () when nothing places it."""
        sig = self.by_id.get(signature)
        if sig is None:
            return ()
        if sig.phase is not None:
            return (sig.phase,)
        row = self.functions.get(str(fields.get("func", "")))
        return row.phases if row is not None else ()

    def anchors_in(self, message: str) -> set[str]:
        """Every anchor that occurs in `message`, overlapping ones included."""
        if self._automaton is not None:
            try:
                return {self._anchor_list[i] for i, _, _ in
                        self._automaton.find_matches_as_indexes(message, overlapping=True)}
            except UnicodeEncodeError:      # a lone surrogate: not UTF-8, so the trie reads it
                pass
        if not self._anchor_list:
            return set()
        finder, overlapping = self._trie
        found = set(finder.findall(message))
        if found:
            found.update([b for a in tuple(found) for b in overlapping[a] if b in message])
        return found

    def only_anchor(self, message: str, anchor: str) -> bool:
        """Whether `anchor` is the one anchor that occurs in `message` (what `match` needs to read a line by
        its shape alone)."""
        if self._automaton is not None and message.isascii():
            found = self._automaton.find_matches_as_indexes(message, overlapping=True)
            return len(found) == 1 and found[0][0] == self._anchor_index[anchor]
        return self.anchors_in(message) == {anchor}

    @functools.cached_property
    def _anchor_index(self) -> dict[str, int]:
        return {anchor: i for i, anchor in enumerate(self._anchor_list)}

    @functools.cached_property
    def _trie(self) -> tuple[re.Pattern[str], dict[str, tuple[str, ...]]]:
        """Without the Aho-Corasick automaton (no wheel, or a line that is not UTF-8): one C-level pass finds
        the anchors in a line (longest first at each position); an anchor it skips overlaps one it found, so
        those few are checked one by one and none is missed. Built on first use: it costs 0.1 s."""
        anchors = self._anchor_list
        overlapping = {a: tuple(b for b in anchors if b != a and _overlap(a, b)) for a in anchors}
        return re.compile(literal_trie(anchors)), overlapping

    def match(self, message: str, budget: MatchBudget | None = None
              ) -> list[tuple[Signature, dict[str, Any], tuple[int, int]]]:
        """Every signature that matches `message`, in file order (slow ones within `budget`)."""
        found = self.anchors_in(message)
        if not found:
            return []
        if len(found) == 1:
            shapes = self._shapes.get(next(iter(found)))
            if shapes:
                for shape, sig, trailing, fields_of in shapes:
                    m = shape.match(message)
                    if m is not None:
                        end = len(message) - len(m[trailing]) if trailing else len(message)
                        return [(sig, fields_of(m), (0, end))]
        hits = []
        for anchor in found:
            for sig in self._by_anchor[anchor]:
                if budget is not None and budget.skips(sig.id):
                    continue
                got = sig.extract(message, budget)
                if got is not None:
                    hits.append((sig, got[0], got[1]))
        if budget is not None:
            budget.end_line()
        if len(hits) > 1:
            specific = [h for h in hits if not h[0].catch_all]
            if specific:
                hits = specific
            hits.sort(key=lambda h: self._order[h[0].id])
        return hits


# --- line shapes: the stats lines a long log is made of, read in one match --------------------------
#
# A log of stats lines spends most of its time in two regex searches per line (the V0 and V1 stats
# signatures share an anchor) and their field conversions. Each shape below is a whole message of the
# exact form vLLM prints, with the same named groups as the signature it stands for. It is used only
# when the signature set holds exactly these signatures under that anchor with exactly these regexes
# (a user-edited signature turns it off), and only for a message in which no other anchor occurs.
# Where a shape matches, the signatures give just that one hit, with the same captures and span:
# tests/test_properties.py compares the two on generated lines.

_V1_STATS_REGEX = (
    r"(?:Engine (?P<engine_index>\d+): |(?P<engines>\d+) Engines Aggregated: )?Avg prompt throughput: "
    r"(?P<prompt_tps>[\d.]+) tokens/s, Avg generation throughput: (?P<generation_tps>[\d.]+) tokens/s, Running: "
    r"(?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs,?(?:.*?\bPreemptions: (?P<preemptions>\d+),)?"
    r"(?:.*?KV cache usage: (?P<kv_usage>[\d.]+%))?(?:, Prefix cache hit rate: (?P<prefix_hit>[\d.]+%))?")
_V0_STATS_REGEX = (
    r"Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, Avg generation throughput: (?P<generation_tps>[\d.]+) "
    r"tokens/s, Running: (?P<running>\d+) reqs, Swapped: (?P<swapped>\d+) reqs, Pending: (?P<waiting>\d+) reqs"
    r"(?:, GPU KV cache usage: (?P<kv_usage>[\d.]+%))?(?:, CPU KV cache usage: (?P<cpu_kv_usage>[\d.]+%))?")
_STATS_ANCHOR = "Avg prompt throughput: "
# (signature id, the regex it must have, the whole-message shape, the group holding text after the match)
_SHAPES = (
    ("stats_v1", _V1_STATS_REGEX, re.compile(
        r"Engine (?P<engine_index>\d+): Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, Avg generation "
        r"throughput: (?P<generation_tps>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) "
        r"reqs, (?:Preemptions: (?P<preemptions>\d+), )?GPU KV cache usage: (?P<kv_usage>[\d.]+%), Prefix cache hit "
        r"rate: (?P<prefix_hit>[\d.]+%)(?P<engines>)\Z"), None),
    ("stats_v0", _V0_STATS_REGEX, re.compile(
        r"Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, Avg generation throughput: "
        r"(?P<generation_tps>[\d.]+) "
        r"tokens/s, Running: (?P<running>\d+) reqs, Swapped: (?P<swapped>\d+) reqs, Pending: (?P<waiting>\d+) reqs, "
        r"GPU KV cache usage: (?P<kv_usage>[\d.]+%), CPU KV cache usage: (?P<cpu_kv_usage>[\d.]+%)(?P<rest>\.?)\Z"),
     "rest"),
)


_Shape = tuple[re.Pattern[str], Signature, "str | None", Callable[[Any], dict[str, Any]]]


def _line_shapes(sigs: SignatureSet) -> dict[str, tuple[_Shape, ...]]:
    """The shapes usable with these signatures, by anchor: all or nothing per anchor."""
    under = sigs._by_anchor.get(_STATS_ANCHOR, [])
    wanted = {ident: regex_text for ident, regex_text, _, _ in _SHAPES}
    if sorted(s.id for s in under) != sorted(wanted) or any(s.regex != wanted[s.id] for s in under):
        return {}
    return {_STATS_ANCHOR: tuple((shape, sigs.by_id[ident], trailing, _shape_fields(sigs.by_id[ident]))
                                 for ident, _, shape, trailing in _SHAPES)}


_SUMMED = frozenset({*STATS_PEAKS, "preemptions"})


@dataclass(frozen=True)
class StatsLineShape:
    """A stats shape as a whole line: vLLM's INFO prefix (envelope.STATS_PREFIX), then the message."""

    line: re.Pattern[str]
    signature: Signature
    trailing: str | None                                  # the group holding text after the match, if any
    fields_of: Callable[[Any], dict[str, Any]]            # the signature's fields of a match, as `match` gives them

    @property
    def anchor(self) -> str:
        return self.signature.anchor

    def span(self, m: Any) -> tuple[int, int]:
        """Where the signature matched in the line, as `match` says in the message."""
        return m.start("at"), m.end() - len(m[self.trailing]) if self.trailing else m.end()

    @functools.cached_property
    def field_plan(self) -> tuple[tuple[str, Callable[[str | None], Any]], ...]:
        """(field, its value of a captured text) for each of the signature's fields (a stats shape has none of
        many values): what `fields_of` converts the text to, looked up as in `summed_plan`."""
        plan = self.fields_of.keywords["plan"]       # type: ignore[attr-defined]  # a partial (_shape_fields)
        assert not any(many for _, _, many in plan), "a stats shape's fields hold one value each"
        return tuple((name, _converted(convert).__getitem__) for name, convert, _ in plan)

    def fields_from(self, raws: Iterable[str | None]) -> dict[str, Any]:
        """`fields_of` for a line whose field_plan groups captured `raws` (empty or None where one took no part):
        a value that does not convert is left out, as `fields_of` leaves it out."""
        out: dict[str, Any] = dict(self.signature.sets)
        for (name, value_of), raw in zip(self.field_plan, raws):
            value = value_of(raw)
            if value is not None:
                out[name] = value
        return out

    @functools.cached_property
    def summed_plan(self) -> tuple[tuple[str, Callable[[str | None], Any], bool], ...]:
        """(field, its value of a captured text, whether its peak is kept) for the fields a merge of stats lines
        keeps the peak or the sum of. The value is what `fields_of` converts the text to, looked up: a stats
        log repeats a few thousand values, so each converter's answers are kept by text (None where there is
        no text or it does not convert)."""
        return tuple((name, _converted(convert).__getitem__, name in STATS_PEAKS) for name, convert in self._summed)

    @functools.cached_property
    def summed_kinds(self) -> bytes | None:
        """How each of summed_plan's fields converts, a byte each (statsrun._figures reads them so in C): 'i', 'f'
        or 'p' for the short int, float and percent converters; None where another converter is in the plan."""
        kinds = [_SHORT_KINDS.get(convert) for _, convert in self._summed]
        return None if None in kinds else b"".join(kinds)       # type: ignore[arg-type]  # none is None

    @functools.cached_property
    def summed_place(self) -> dict[str, int]:
        """Each of summed_plan's fields' place in it."""
        return {name: place for place, (name, _) in enumerate(self._summed)}

    @functools.cached_property
    def _summed(self) -> tuple[tuple[str, Callable[[str], Any]], ...]:
        plan = self.fields_of.keywords["plan"]       # type: ignore[attr-defined]  # a partial (_shape_fields)
        return tuple((name, convert) for name, convert, _ in plan if name in _SUMMED)


# A shape's groups hold only digits, dots and a trailing %: a short one is in range however it reads, so
# it needs no range check (these give what the signature's converters give, without their cost per field).
def _short_int(raw: str) -> int:
    return int(raw) if len(raw) <= 15 else _to_int(raw)


def _short_float(raw: str) -> float:
    return float(raw) if len(raw) <= 15 else _to_float(raw)


def _short_percent(raw: str) -> float:
    return float(raw.rstrip("%")) / 100.0 if len(raw) <= 7 else _to_percent(raw)


_SHORT_FORMS: Mapping[Callable[[str], Any], Callable[[str], Any]] = {
    _to_int: _short_int, _to_float: _short_float, _to_percent: _short_percent}
_SHORT_KINDS: Mapping[Callable[[str], Any], bytes] = {_short_int: b"i", _short_float: b"f", _short_percent: b"p"}


def answer_new_keys(known: dict[Any, Any], keys: Sequence[Any], items: Iterable[Any],
                    answer: Callable[[Any], Any]) -> None:
    """Add to `known` the answer for each key it lacks, asked of the first item with that key (items and keys
    in step): a batch's answers are then looked up, each asked once."""
    new = set(keys).difference(known)
    for key, item in zip(keys, items):
        if not new:
            break
        if key in new:
            known[key] = answer(item)
            new.discard(key)


class _Converted(dict[Any, Any]):
    """A converter's answers by captured text (None where there is none or it does not convert, as fields_of
    leaves it out): a stats log repeats a few thousand values, so looking one up beats converting it again."""

    def __init__(self, convert: Callable[[str], Any]) -> None:
        super().__init__()
        self.convert = convert

    def __missing__(self, raw: str | None) -> Any:
        try:
            value = self.convert(raw) if raw else None
        except (ValueError, OverflowError):
            value = None
        if len(self) < MAX_VALUES_KEPT:
            self[raw] = value
        return value


_CONVERTED: dict[Callable[[str], Any], _Converted] = {}


def _converted(convert: Callable[[str], Any]) -> _Converted:
    known = _CONVERTED.get(convert)
    if known is None:
        known = _CONVERTED[convert] = _Converted(convert)
    return known


def _shape_fields(sig: Signature) -> Callable[[Any], dict[str, Any]]:
    """`sig.fields_of` for a match of its shape, with the short converters."""
    return functools.partial(sig.fields_of, plan=tuple((name, _SHORT_FORMS.get(convert, convert), many)
                                                       for name, convert, many in sig.plan))


def literal_trie(words: Iterable[str]) -> str:
    """A regex matching any of `words`, the longest one at a position, factored into a trie: a
    plain alternation of ~100 literals tries each one at every position, this tries one branch."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body     # greedy: the longer word first
    return build(trie)


def _overlap(a: str, b: str) -> bool:
    """Can an occurrence of `b` start inside one of `a`: `b` within `a`, or `a` ending as `b` begins."""
    return b in a or any(a.endswith(b[:k]) for k in range(1, min(len(a), len(b))))


def _escaped(anchor: str) -> bytes:
    """The anchor as it reads inside a JSON string (docker json-file, Loki)."""
    return anchor.replace("\\", "\\\\").replace('"', '\\"').encode()


def nested_quantifier(pattern: str) -> bool:
    """Does `pattern` repeat a group that can split a string in many ways, like `(a+)+`, `(\\w+\\s?)*`
    or `(x|xx)+`? Such a pattern can take exponential time on a line it almost matches. A heuristic
    over Python's regex parser: a repeated group whose every fixed character could also be taken by a
    part of it that varies in length, or whose alternatives can start with the same character.
    Patterns the stdlib parser cannot read (`regex`-only syntax) are not judged."""
    try:
        from re import _constants as sc  # type: ignore[attr-defined]
        from re import _parser as sp  # type: ignore[attr-defined]
        tree = sp.parse(pattern)
    except Exception:          # `regex`-only syntax: not judged
        return False
    repeat_ops = {sc.MAX_REPEAT, sc.MIN_REPEAT, getattr(sc, "POSSESSIVE_REPEAT", sc.MAX_REPEAT)}

    categories: dict[Any, Callable[[str], bool]] = {
        sc.CATEGORY_DIGIT: str.isdigit, sc.CATEGORY_SPACE: str.isspace,
        sc.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    }

    def negated(test: Callable[[str], bool]) -> Callable[[str], bool]:
        return lambda ch: not test(ch)

    for positive, negative in ((sc.CATEGORY_DIGIT, sc.CATEGORY_NOT_DIGIT), (sc.CATEGORY_SPACE, sc.CATEGORY_NOT_SPACE),
                               (sc.CATEGORY_WORD, sc.CATEGORY_NOT_WORD)):
        categories[negative] = negated(categories[positive])

    def takes(op: Any, av: Any, ch: str) -> bool:
        """Can this one-character item take `ch`? (unknown items: assume it can)"""
        if op is sc.LITERAL:
            return ord(ch) == av
        if op is sc.NOT_LITERAL:
            return ord(ch) != av
        if op is sc.ANY:
            return ch != "\n"
        if op is sc.CATEGORY:
            return categories.get(av, lambda c: True)(ch)
        if op is sc.IN:
            negate = any(o is sc.NEGATE for o, _ in av)
            hit = any(ord(ch) == v if o is sc.LITERAL else v[0] <= ord(ch) <= v[1] if o is sc.RANGE
                      else categories.get(v, lambda c: True)(ch) if o is sc.CATEGORY else False
                      for o, v in av if o is not sc.NEGATE)
            return hit != negate
        return True

    def first(items: Any) -> Any:
        item = items[0]
        while item[0] is sc.SUBPATTERN and item[1][-1]:
            item = item[1][-1][0]
        return item

    def inner_repeats(items) -> list:  # type: ignore[no-untyped-def]
        """The parts of a group that match a varying number of characters: x+, x*, x?, (|x)."""
        out = []
        for op, av in items:
            if op in repeat_ops and av[0] < av[1]:
                out.append(av[2])
            elif op is sc.BRANCH and any(not b for b in av[1]):
                out.extend(b for b in av[1] if b)
            elif op is sc.SUBPATTERN:
                out.extend(inner_repeats(av[-1]))
        return out

    def ambiguous(body) -> bool:  # type: ignore[no-untyped-def]
        while len(body) == 1 and body[0][0] is sc.SUBPATTERN:
            body = list(body[0][1][-1])
        branches = body[0][1][1] if len(body) == 1 and body[0][0] is sc.BRANCH else [body]
        starts = [first(b) for b in branches if b]
        if any(op is sc.LITERAL and any(takes(o, v, chr(av)) for o, v in starts[:i] + starts[i + 1:])
               for i, (op, av) in enumerate(starts)):
            return True           # (x|xy)+: two branches can take the same first character
        for branch in branches:
            inner = inner_repeats(branch)
            if not inner:
                continue
            separators = [chr(av) for op, av in branch if op is sc.LITERAL]
            if not any(all(not takes(first(b)[0], first(b)[1], ch) for b in inner) for ch in separators):
                return True
        return False

    def walk(items) -> bool:  # type: ignore[no-untyped-def]
        for op, av in items:
            if op in repeat_ops:
                _, hi, body = av
                if (hi == sc.MAXREPEAT or hi > 16) and ambiguous(list(body)):
                    return True
                if walk(body):
                    return True
            elif op is sc.SUBPATTERN and walk(av[-1]):
                return True
            elif op is sc.BRANCH and any(walk(b) for b in av[1]):
                return True
            elif op in (sc.ASSERT, sc.ASSERT_NOT) and walk(av[1]):
                return True
        return False
    return walk(tree)


def default_signature_dir() -> Path:
    return bundled_dir("triage.rules_data") / "signatures"


def load_signatures(directory: Path | None = None, compile_now: bool | None = None) -> SignatureSet:
    """Load and validate every `*.toml` in the signatures directory (the bundled one by default).

    Every regex is compiled and checked now for a directory of the user's own (`compile_now` None or True);
    the bundled ones, which the test suite and `vtriage rules` check whole, when each is first searched.
    """
    if compile_now is None:
        compile_now = directory is not None
    directory = directory or default_signature_dir()
    files = sorted(Path(directory).glob("*.toml"))
    if not files:
        raise RuleError(str(directory), "signatures", "no *.toml signature files found",
                        "point --rules at a directory holding signatures/*.toml")
    sigs: list[Signature] = []
    seen: dict[str, str] = {}
    functions: list[tuple[str, FunctionPhase]] = []
    for path in files:
        in_file, rows = _load_file(path, compile_now)
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
    return SignatureSet(sigs, function_table(functions))


def _load_file(path: Path, compile_now: bool) -> tuple[list[Signature], list[FunctionPhase]]:
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
    return ([_parse_signature(path, i, entry, compile_now) for i, entry in enumerate(entries)],
            parse_functions(str(path), data.get("function", [])))


@functools.lru_cache(maxsize=None)
def _compiled(where: str, ident: str, text: str, fields: tuple[str, ...]) -> Any:
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


def _parse_signature(path: Path, index: int, entry: Any, compile_now: bool) -> Signature:
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
    if compile_now:
        _compiled(where, entry["id"], entry["regex"], tuple(fields))
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
