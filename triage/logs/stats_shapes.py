"""Stats lines read in one match: the whole-message forms of vLLM's stats lines, used in place of their signatures.

A log of stats lines spends most of its time in two regex searches per line (the V0 and V1 stats
signatures share an anchor) and their field conversions. Each shape below is a whole message of the
exact form vLLM prints, with the same named groups as the signature it stands for. It is used only
when the signature set holds exactly these signatures under that anchor with exactly these regexes
(a user-edited signature turns it off), and only for a message in which no other anchor occurs.
Where a shape matches, the signatures give just that one hit, with the same captures and span:
tests/test_properties.py compares the two on generated lines.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..vocabulary import STATS_PEAKS
from .signature_files import FIELD_TYPES, FieldPlan, Signature

MAX_VALUES_KEPT = 65536     # answers kept per converter of a shape (a stats log's values repeat)

_V1_STATS_REGEX = (
    r"(?:Engine (?P<engine_index>\d+): |(?P<engines>\d+) Engines Aggregated: )?Avg prompt throughput: "
    r"(?P<prompt_tps>[\d.]+) tokens/s, Avg generation throughput: (?P<generation_tps>[\d.]+) tokens/s, Running: "
    r"(?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs,?(?:.*?\bPreemptions: (?P<preemptions>\d+),)?"
    r"(?:.*?KV cache usage: (?P<kv_usage>[\d.]+%))?(?:, Prefix cache hit rate: (?P<prefix_hit>[\d.]+%))?")
_V0_STATS_REGEX = (
    r"Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, Avg generation throughput: (?P<generation_tps>[\d.]+) "
    r"tokens/s, Running: (?P<running>\d+) reqs, Swapped: (?P<swapped>\d+) reqs, Pending: (?P<waiting>\d+) reqs"
    r"(?:, GPU KV cache usage: (?P<kv_usage>[\d.]+%))?(?:, CPU KV cache usage: (?P<cpu_kv_usage>[\d.]+%))?")
STATS_ANCHOR = "Avg prompt throughput: "
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
_SUMMED = frozenset({*STATS_PEAKS, "preemptions"})


MessageShape = tuple[re.Pattern[str], Signature, "str | None", Callable[[Any], dict[str, Any]]]


def message_shapes(under_stats_anchor: Sequence[Signature]) -> tuple[MessageShape, ...]:
    """The shapes usable with the signatures under the stats anchor: all of them, or none where those signatures
    are not exactly the bundled ones. Each: (whole-message pattern, signature, trailing group, its fields of a
    match)."""
    wanted = {ident: regex_text for ident, regex_text, _, _ in _SHAPES}
    if sorted(s.id for s in under_stats_anchor) != sorted(wanted) or \
            any(s.regex != wanted[s.id] for s in under_stats_anchor):
        return ()
    by_id = {s.id: s for s in under_stats_anchor}
    return tuple((shape, by_id[ident], trailing, _shape_fields(by_id[ident])) for ident, _, shape, trailing in _SHAPES)


class StatsLineShape:
    """A stats shape as a whole line: vLLM's INFO prefix (envelope.STATS_PREFIX), then the message. It holds each
    of its converters' answers by captured text, built up as lines are read: a stats log repeats a few thousand
    values, so looking one up beats converting it again."""

    def __init__(self, line: re.Pattern[str], signature: Signature, trailing: str | None) -> None:
        plan = _short_plan(signature)
        assert not any(many for _, _, many in plan), "a stats shape's fields hold one value each"
        self.line = line
        self.signature = signature
        self.trailing = trailing                # the group holding text after the match, if any
        self.fields_of = _shape_fields(signature)   # the signature's fields of a match, as `match` gives them
        answers = {convert: _Answers(convert) for _, convert, _ in plan}
        # (field, its value of a captured text) for each of the signature's fields: what `fields_of` converts the
        # text to (None where there is no text or it does not convert)
        self.field_plan: tuple[tuple[str, Callable[[str | None], Any]], ...] = tuple(
            (name, answers[convert].__getitem__) for name, convert, _ in plan)
        summed = [(name, convert) for name, convert, _ in plan if name in _SUMMED]
        # (field, its value of a captured text, whether its peak is kept) for the fields a merge of stats lines
        # keeps the peak or the sum of
        self.summed_plan: tuple[tuple[str, Callable[[str | None], Any], bool], ...] = tuple(
            (name, answers[convert].__getitem__, name in STATS_PEAKS) for name, convert in summed)
        self.summed_place: dict[str, int] = {name: place for place, (name, _) in enumerate(summed)}

    @property
    def anchor(self) -> str:
        return self.signature.anchor

    def span(self, m: Any) -> tuple[int, int]:
        """Where the signature matched in the line, as `match` says in the message."""
        return m.start("at"), m.end() - len(m[self.trailing]) if self.trailing else m.end()

    def fields_from(self, raws: Iterable[str | None]) -> dict[str, Any]:
        """`fields_of` for a line whose field_plan groups captured `raws` (empty or None where one took no part):
        a value that does not convert is left out, as `fields_of` leaves it out."""
        out: dict[str, Any] = dict(self.signature.sets)
        for (name, value_of), raw in zip(self.field_plan, raws):
            value = value_of(raw)
            if value is not None:
                out[name] = value
        return out


class _Answers(dict[Any, Any]):
    """A converter's answers by captured text (None where there is none or it does not convert, as fields_of
    leaves it out), at most MAX_VALUES_KEPT of them."""

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


# A shape's groups hold only digits, dots and a trailing %: a short one is in range however it reads, so
# it needs no range check (these give what the signature's converters give, without their cost per field).
_TO_INT, _TO_FLOAT, _TO_PERCENT = FIELD_TYPES["int"], FIELD_TYPES["float"], FIELD_TYPES["percent"]


def _short_int(raw: str) -> int:
    return int(raw) if len(raw) <= 15 else _TO_INT(raw)


def _short_float(raw: str) -> float:
    return float(raw) if len(raw) <= 15 else _TO_FLOAT(raw)


def _short_percent(raw: str) -> float:
    return float(raw.rstrip("%")) / 100.0 if len(raw) <= 7 else _TO_PERCENT(raw)


_SHORT_FORMS: Mapping[Callable[[str], Any], Callable[[str], Any]] = {
    _TO_INT: _short_int, _TO_FLOAT: _short_float, _TO_PERCENT: _short_percent}


def _short_plan(sig: Signature) -> FieldPlan:
    """`sig.plan` with the short converters, for a match of its shape."""
    return tuple((name, _SHORT_FORMS.get(convert, convert), many) for name, convert, many in sig.plan)


def _shape_fields(sig: Signature) -> Callable[[Any], dict[str, Any]]:
    """`sig.fields_of` for a match of its shape, with the short converters."""
    return functools.partial(sig.fields_of, plan=_short_plan(sig))


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
