"""Keep secrets that vLLM logs (API keys in its args, Hugging Face tokens, bearer headers, URL
passwords, cloud keys) out of every report, and count what was hidden.

Redaction happens once, when evidence text is captured, so no renderer can leak what it never saw.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

import re

MASK = "***"

# (kind, pattern). The group named `secret` is what gets masked; the rest of the match stays.
_PATTERNS: tuple[tuple[str, Any], ...] = (
    ("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@'\"]+:(?P<secret>[^@\s/'\"]+)@")),
    ("bearer_token", re.compile(r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})")),
    ("api_key", re.compile(
        r"(?i)(?:\bapi[_-]?key\b|--api-key)['\"]?\s*(?:=|:|\s)\s*\[?\s*['\"]?(?P<secret>(?!\*\*\*|None\b)[^'\"\s,)\]}]{4,})")),
    ("hf_token", re.compile(
        r"(?i)(?:\bhf_token\b|\bHUGGING_FACE_HUB_TOKEN\b|\bHF_TOKEN\b)['\"]?\s*(?:=|:)\s*['\"]?(?P<secret>(?!\*\*\*|None\b|True\b|False\b)[^'\"\s,)}]{4,})")),
    ("hf_token", re.compile(r"\b(?P<secret>hf_[A-Za-z0-9]{20,})\b")),
    ("openai_key", re.compile(r"\b(?P<secret>sk-[A-Za-z0-9_-]{16,})")),
    ("aws_key", re.compile(r"\b(?P<secret>(?:AKIA|ASIA)[0-9A-Z]{16})\b")),
    ("aws_key", re.compile(r"(?i)\baws_secret_access_key\b['\"]?\s*(?:=|:)\s*['\"]?(?P<secret>[A-Za-z0-9/+=]{20,})")),
    ("password", re.compile(
        r"(?i)\b(?:password|passwd|secret|access_token|auth_token|token)\b['\"]?\s*(?:=|:)\s*['\"]?(?P<secret>(?!\*\*\*|None\b|True\b|False\b)[^'\"\s,)}]{4,})")),
)
# Every pattern above needs one of these; most log lines have none, and skip the nine searches.
# Searched in the lower-cased line: case-insensitive matching would make it four times slower.
_QUICK = re.compile(r"(?:key|token|passw|passwd|secret)['\"]?\s*[=:]|--api-key|hf_[a-z0-9]{8}|sk-[a-z0-9_-]{8}"
                    r"|bearer\s|://[^\s/@]+:[^\s/@]*@|akia|asia")


# Prompt and completion text in request logging, dumps and request errors (--redact-prompts).
_PROMPTS = (
    ("prompt", re.compile(r"""(?:\bprompt|'prompt'|"prompt"|\boutput|'content'|"content")\s*[:=]\s*(?P<q>['"])(?P<secret>(?:\\.|(?!(?P=q)).)*)(?P=q)""")),
    ("prompt", re.compile(r"\bprompt(?:_token)?_ids\s*[:=]\s*\[(?P<secret>[^\]]*)\]")),
)
_QUICK_PROMPT = re.compile(r"(?i)prompt|output|content")


class Redactor:
    """Masks secrets (and, when asked, prompts); `counts` says which kinds were hidden and how often."""

    def __init__(self, enabled: bool = True, prompts: bool = False) -> None:
        self.enabled = enabled
        self.prompts = prompts
        self.counts: Counter[str] = Counter()
        self._clean: set[str] = set()      # short field values known to hold nothing to mask ("v1", a model name)

    def redact_mapped(self, text: str) -> tuple[str, Callable[[int], int]]:
        """Redact `text`; also return a function mapping offsets in `text` to offsets in the result."""
        patterns: list[tuple[str, re.Pattern[str]]] = []
        if self.enabled and _QUICK.search(text.lower()):
            patterns.extend(_PATTERNS)
        if self.prompts and _QUICK_PROMPT.search(text):
            patterns.extend(_PROMPTS)
        if not patterns:
            return text, _same
        cuts: list[tuple[int, int]] = []
        for kind, pattern in patterns:
            for m in pattern.finditer(text):
                start, end = m.span("secret")
                if any(s < end and start < e for s, e in cuts):
                    continue
                cuts.append((start, end))
                self.counts[kind] += 1
        if not cuts:
            return text, lambda pos: pos
        cuts.sort()
        out, shifts, last = [], [], 0
        for start, end in cuts:
            out.append(text[last:start])
            out.append(MASK)
            shifts.append((start, end, len(MASK) - (end - start)))
            last = end
        out.append(text[last:])

        def mapper(pos: int) -> int:
            delta = 0
            for start, end, change in shifts:
                if pos >= end:
                    delta += change
                elif pos > start:
                    return start + delta + min(pos - start, len(MASK))
            return pos + delta
        return "".join(out), mapper

    def text(self, text: str) -> str:
        return self.redact_mapped(text)[0]

    def fields(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The fields of a line whose text was already redacted (and counted): masked, not counted twice."""
        counts = self.counts.copy()
        out = dict(fields)
        for key, value in out.items():
            if isinstance(value, str) and value not in self._clean:
                masked = self.text(value)
                if masked == value and len(value) <= _CLEAN_MAX and len(self._clean) < _CLEAN_CAP:
                    self._clean.add(value)       # nothing to mask now, nothing ever: the same text, the same answer
                out[key] = masked
        self.counts = counts
        return out


_CLEAN_MAX, _CLEAN_CAP = 200, 10_000


def _same(pos: int) -> int:
    return pos


def clip(text: str, span: tuple[int, int] | None, limit: int) -> tuple[str, tuple[int, int] | None]:
    """Shorten `text` to about `limit` characters around `span`, marking cuts with an ellipsis."""
    if len(text) <= limit:
        return text, span
    start, end = span if span else (0, 0)
    room = max(0, limit - (end - start))
    left = max(0, start - room // 3)
    right = min(len(text), max(end, left + limit))
    head = "…" if left > 0 else ""
    tail = "…" if right < len(text) else ""
    clipped = head + text[left:right] + tail
    if span is None:
        return clipped, None
    shift = len(head) - left
    return clipped, (start + shift, min(end, right) + shift)
