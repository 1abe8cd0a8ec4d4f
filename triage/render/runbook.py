"""A runbook page (docs/runbooks/*.md) as terminal text: `vtriage explain` is read, not pasted.

The pages use a small part of Markdown: headings, paragraphs, `-` and `1.` lists, **bold**, `code`
and [links](url). Headings become underlined titles, paragraphs and list items are re-wrapped, code
and bold keep their words (in colour on a terminal), a link shows its address after its text.
"""
from __future__ import annotations

import re
import textwrap

from .text import _Style

WIDTH = 100
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_CODE = re.compile(r"(`+)(.+?)\1")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITEM = re.compile(r"^(\s*)([-*]|\d+\.)\s+(.*)$")
_ESCAPE = re.compile(r"\\([\\`*_\[\]()#+\-.!|])")


def _inline(text: str, s: _Style) -> str:
    text = _LINK.sub(lambda m: f"{m.group(1)} <{m.group(2)}>", text)
    text = _CODE.sub(lambda m: s(m.group(2).strip(), "cyan"), text)
    text = _BOLD.sub(lambda m: s(m.group(1), "bold"), text)
    return _ESCAPE.sub(r"\1", text)


def _blocks(markdown: str) -> list[tuple[str, str, str]]:
    """(kind, marker, text): headings, list items and paragraphs, continuation lines joined."""
    blocks: list[tuple[str, str, str]] = []
    for line in markdown.splitlines():
        stripped = line.strip()
        item = _ITEM.match(line)
        if not stripped:
            blocks.append(("blank", "", ""))
        elif stripped.startswith("#"):
            level = len(stripped) - len(stripped.lstrip("#"))
            blocks.append((f"h{level}", "", stripped[level:].strip()))
        elif item:
            blocks.append(("item", item.group(1) + item.group(2), item.group(3)))
        elif blocks and blocks[-1][0] in ("item", "para"):
            kind, marker, text = blocks[-1]
            blocks[-1] = (kind, marker, f"{text} {stripped}")
        else:
            blocks.append(("para", "", stripped))
    return blocks


def render_runbook_text(markdown: str, color: bool = False, width: int = WIDTH) -> str:
    s = _Style(color)
    out: list[str] = []
    for kind, marker, text in _blocks(markdown):
        words = _inline(text, s)
        if kind == "blank":
            if out and out[-1] != "":
                out.append("")
        elif kind.startswith("h"):
            title = _ESCAPE.sub(r"\1", _CODE.sub(r"\2", text))
            if out and out[-1] != "":
                out.append("")
            out.append(s(title, "bold"))
            out.append(("=" if kind == "h1" else "-") * len(title))
        elif kind == "item":
            indent = " " * (len(marker) + 1)
            out.extend(textwrap.wrap(words, width, initial_indent=f"{marker} ", subsequent_indent=indent,
                                     break_on_hyphens=False, break_long_words=False))
        else:
            out.extend(textwrap.wrap(words, width, break_on_hyphens=False, break_long_words=False))
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"
