"""Renderers: one function per output format, each reading only the Report."""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

Renderer = Callable[..., str]


def _on_first_use(module: str, name: str) -> Renderer:
    """The renderer, imported when a report is rendered: the HTML one loads jinja2, which `vtriage
    --version` and a text report should not wait for."""
    def render(report: Any, **options: Any) -> str:
        return getattr(importlib.import_module(module, __name__), name)(report, **options)
    return render


RENDERERS: Mapping[str, Renderer] = {
    "text": _on_first_use(".text", "render_text"),
    "json": _on_first_use(".json", "render_json"),
    "markdown": _on_first_use(".markdown", "render_markdown"),
    "html": _on_first_use(".html", "render_html"),
}
