"""The on-call docs say what the code does: the recipes use options the commands have, links land."""
from __future__ import annotations

import re
import shlex

import click
import pytest

from triage.cli import cli

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "runbooks").glob("*.md"))]


def _options(command: click.Command) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


def _command_lines(text: str):
    for block in re.findall(r"```(?:sh|text)?\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():     # a shell line continued with a backslash
            for part in line.split("|"):
                part = part.split("#")[0].strip().removeprefix("$ ")
                if part.startswith("vtriage ") or part == "vtriage":
                    yield part


def test_the_kubectl_recipe_and_the_ticket_attachment_are_in_the_readme_and_oncall_page():
    for page in ("README.md", "docs/oncall.md"):
        text = (ROOT / page).read_text()
        assert "kubectl logs deploy/vllm --previous --timestamps | vtriage - --metrics-url http" in text, page
        assert "vtriage server.log --format html -o incident.html" in text, page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_vtriage_command_uses_options_it_has(page):
    wrong = []
    for line in _command_lines(page.read_text()):
        words = shlex.split(line)[1:]
        name = words[0] if words and words[0] in cli.commands else "diagnose"
        known = _options(cli.commands[name])
        wrong += [(line, w) for w in words if w.startswith("-") and w != "-" and w.split("=")[0] not in known]
    assert not wrong


def _slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_to_docs_pages_and_their_sections_exist(page):
    for target, anchor in re.findall(r"\]\(([^)#\s]+\.md|[^)#\s]*/)?(?:#([^)\s]+))?\)", page.read_text()):
        if target.startswith("http"):
            continue
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
            anchors = {_slug(h) for h in headings} | set(re.findall(r'<a id="([^"]+)"></a>', path.read_text()))
            assert anchor in anchors, f"{page.name}: {target}#{anchor}"
