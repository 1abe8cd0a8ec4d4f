"""Links in the README and docs/ lead to files in the repository, so they work in a clone.

A link out of the tree (`../shared/...`, an absolute path) works only on the machine it was written on."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_HTML_TARGET = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)


def _targets(text: str) -> list[str]:
    """Every link and image target of a page, raw HTML included."""
    out = []
    for token in MarkdownIt().parse(text):
        if token.type in ("html_block", "html_inline"):
            out += _HTML_TARGET.findall(token.content)
        for child in token.children or ():
            if child.type == "link_open":
                out.append(str(child.attrs["href"]))
            elif child.type == "image":
                out.append(str(child.attrs["src"]))
            elif child.type == "html_inline":
                out += _HTML_TARGET.findall(child.content)
    return out


def _relative(target: str) -> str | None:
    """The path part of a link into the tree; None for a web address, a mail link or an anchor on the page."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return unquote(parts.path)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(page: Path):
    broken = []
    for target in _targets(page.read_text(encoding="utf-8")):
        path = _relative(target)
        if path is None:
            continue
        resolved = (ROOT / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
        resolved = resolved.resolve()
        if not resolved.is_relative_to(ROOT.resolve()) or not resolved.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links outside the repository or to a missing file: {broken}"


def test_the_link_check_sees_links():
    """The check cannot pass by finding nothing: it reads Markdown, reference and HTML links."""
    page = ('[a](docs/x.md) ![b](img/y.png) [c][r] <a href="../shared/z.md">z</a> [w](https://e.org) [s](#top)\n'
            "\n[r]: ../r.md\n")
    assert [_relative(t) for t in _targets(page)] == ["docs/x.md", "img/y.png", "../r.md", "../shared/z.md", None, None]
