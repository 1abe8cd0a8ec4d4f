"""Renderers: one function per output format, each reading only the Report."""
from __future__ import annotations

from typing import Callable, Mapping

from .html import render_html
from .json import render_json
from .markdown import render_markdown
from .text import render_text

Renderer = Callable[..., str]

RENDERERS: Mapping[str, Renderer] = {
    "text": render_text,
    "json": render_json,
    "markdown": render_markdown,
    "html": render_html,
}
