"""Renderers: one function per output format, each reading only the Report."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .json import render_json
from .markdown import render_markdown
from .text import render_text

Renderer = Callable[..., str]


def render_html(report: Any, **options: Any) -> str:
    # jinja2 and the templates: 40 ms of imports that only the HTML report needs.
    from .html import render_html as render
    return render(report, **options)


RENDERERS: Mapping[str, Renderer] = {
    "text": render_text,
    "json": render_json,
    "markdown": render_markdown,
    "html": render_html,
}
