"""Matching log lines against the loaded signatures: which signatures a message holds, and their typed fields.

A SignatureSet is built once per run from the signature files (signature_files.py reads and validates them). It
holds what matching needs, made at load: the signatures by anchor, the anchor finder, the block scanner's patterns
(bulk request lines, quiet lines) and the stats shapes (stats_shapes.py). Each signature's regex is compiled when
first searched and kept by the set.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

try:        # Aho-Corasick in Rust: all anchors of a line in one pass, several times faster than the trie
    import ahocorasick_rs
except ImportError:         # no wheel for this platform: the regex trie below finds the same anchors
    ahocorasick_rs = None  # type: ignore[assignment]  # checked before use

from ..sources.scan import BulkPattern, QuietLines, bulk_pattern, quiet_lines_possible
from .envelope import QUIET_HEAD, QUIET_STOPS, STATS_PREFIX
from .phases import FunctionPhase
from .signature_files import Signature, compile_regex, default_signature_dir, read_signature_files
from .stats_shapes import STATS_ANCHOR, MessageShape, StatsLineShape, message_shapes

MATCH_TIMEOUT_S = 0.25      # a pathological user regex must not hang the tool: each search gets this long
SLOW_BUDGET_S = 5.0         # per input: once timeouts have cost this much, patterns that timed out are skipped
_DIGITS = "0123456789"


def load_signatures(directory: Path | None = None, compile_now: bool | None = None) -> SignatureSet:
    """Load and validate every `*.toml` in the signatures directory (the bundled one by default).

    Every regex is compiled and checked now for a directory of the user's own (`compile_now` None or True);
    the bundled ones, which the test suite and `vtriage rules` check whole, when each is first searched.
    """
    if compile_now is None:
        compile_now = directory is not None
    files = read_signature_files(directory or default_signature_dir(), compile_now)
    return SignatureSet(files.signatures, files.functions, files.patterns)


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

    def __init__(self, signatures: Iterable[Signature], functions: Mapping[str, FunctionPhase] | None = None,
                 patterns: Mapping[str, Any] | None = None) -> None:
        self.signatures: tuple[Signature, ...] = tuple(signatures)
        self.functions: Mapping[str, FunctionPhase] = functions or {}     # vLLM's functions and their phases
        # Each signature's compiled regex by id, those compiled when loading, the others added when first searched:
        # a short log meets a few of the signatures, and compiling them all would take a good part of its run.
        self._patterns: dict[str, Any] = dict(patterns or {})
        self.by_id = {s.id: s for s in self.signatures}
        self._order = {s.id: i for i, s in enumerate(self.signatures)}
        anchors: dict[str, list[Signature]] = {}
        for sig in self.signatures:
            anchors.setdefault(sig.anchor, []).append(sig)
        self._by_anchor = anchors
        # What the block scanner sets aside (see scan.py), JSON-escaped forms included: vLLM's own request lines,
        # then generic ones (uvicorn access lines), counted apart because only the first prove the log is vLLM's.
        self.bulk_anchors: tuple[tuple[bytes, ...], ...] = tuple(
            tuple(sorted({a for s in group for a in (s.anchor.encode(), _escaped(s.anchor))}))
            for group in ([s for s in self.signatures if s.bulk and not s.generic],
                          [s for s in self.signatures if s.bulk and s.generic]) if group)
        self.bulk_patterns: tuple[BulkPattern, ...] = tuple(bulk_pattern(group) for group in self.bulk_anchors)
        self.bulk_vllm_patterns = 1 if any(s.bulk and not s.generic for s in self.signatures) else 0
        self._anchor_list = list(anchors)
        self._anchor_index = {anchor: i for i, anchor in enumerate(self._anchor_list)}
        # DEBUG and INFO lines holding no anchor: counted, never parsed (see scan.QuietLines)
        self.quiet: QuietLines | None = QuietLines(re.compile(QUIET_HEAD), tuple(
            sorted({*QUIET_STOPS, *(a.encode() for a in anchors)}))) if quiet_lines_possible() and anchors else None
        self._automaton = ahocorasick_rs.AhoCorasick(self._anchor_list) if ahocorasick_rs and anchors else None
        # Anchors holding a digit: whether one occurs in a line depends on its digits, not only on its digit form
        # (logs/statsrun.py answers the rest once per form).
        self.digit_anchors = tuple(a for a in self._anchor_list if any(c in _DIGITS for c in a))
        shapes = message_shapes(anchors.get(STATS_ANCHOR, []))
        # the stats lines' whole messages by their anchor, read in one match where no other anchor occurs
        self._shapes: dict[str, tuple[MessageShape, ...]] = {STATS_ANCHOR: shapes} if shapes else {}
        # the same shapes as whole lines, for runs of stats lines read in one match a line (logs/statsrun.py)
        self.stats_lines: tuple[StatsLineShape, ...] = tuple(
            StatsLineShape(re.compile(STATS_PREFIX + shape.pattern, re.ASCII), sig, trailing)
            for shape, sig, trailing, _ in shapes)

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
    def _trie(self) -> tuple[re.Pattern[str], dict[str, tuple[str, ...]]]:
        """Without the Aho-Corasick automaton (no wheel, or a line that is not UTF-8): one C-level pass finds
        the anchors in a line (longest first at each position); an anchor it skips overlaps one it found, so
        those few are checked one by one and none is missed. Built on first use: most runs never need it, and
        building it takes longer than loading the signatures."""
        anchors = self._anchor_list
        overlapping = {a: tuple(b for b in anchors if b != a and _overlap(a, b)) for a in anchors}
        return re.compile(literal_trie(anchors)), overlapping

    def pattern(self, sig: Signature) -> Any:
        """`sig`'s compiled regex (a RuleError naming its file and key where it does not compile)."""
        pattern = self._patterns.get(sig.id)
        if pattern is None:
            pattern = self._patterns[sig.id] = compile_regex(sig.origin, sig.id, sig.regex, sig.fields)
        return pattern

    def extract(self, sig: Signature, message: str, budget: MatchBudget | None = None
                ) -> tuple[dict[str, Any], tuple[int, int]] | None:
        """Search `message` with `sig`; return typed fields and the matched span, or None (a search that takes
        longer than MATCH_TIMEOUT_S is given up and charged to `budget`)."""
        try:
            m = self.pattern(sig).search(message, timeout=MATCH_TIMEOUT_S)
        except TimeoutError:
            if budget is not None:
                budget.timed_out(sig.id)
            return None
        if m is None:
            return None
        return sig.fields_of(m), m.span()

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
                got = self.extract(sig, message, budget)
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
