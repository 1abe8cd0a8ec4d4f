"""The docs say what the code does: generated pages are in step, the JSON schema holds."""
from __future__ import annotations

import json

import jsonschema

from triage.cli import facts_markdown
from triage.render.json import report_dict
from triage.vocabulary import VERDICTS

from conftest import ROOT, diagnose_text

SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())


def test_facts_page_is_generated_from_the_registry():
    assert (ROOT / "docs" / "facts.md").read_text() == facts_markdown(), \
        "docs/facts.md is stale: vtriage rules --facts > docs/facts.md"


def test_every_verdict_is_documented():
    text = (ROOT / "docs" / "verdicts.md").read_text()
    for verdict in VERDICTS:
        assert f'<a id="{verdict}"></a>' in text and f"## {verdict}" in text


def test_report_matches_the_schema(kit):
    for log in ("Loading model weights took 14.9888 GB\n# GPU blocks: 1478, # CPU blocks: 2048\n"
                "The model's max seq len (29000) is larger than the maximum number of tokens that can be stored "
                "in KV cache (23648).\n",
                "nothing to see\n",
                "INFO:     Application startup complete.\n"):
        jsonschema.validate(report_dict(diagnose_text(kit, log)), SCHEMA)


def test_readme_example_output_is_what_vtriage_prints(update_golden):
    """The README's example is real: running its command prints exactly the block shown."""
    import re

    from conftest import run_cli
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- example-output: vtriage (\S+) -->\n```text\n(.*?)\n```\n<!-- /example-output -->",
                  readme, re.S)
    assert m, "README has no example-output block"
    path, shown = m.groups()
    assert f".venv/bin/vtriage {path}" in readme, "the set-up command must run the same example"
    actual = run_cli(path).stdout.decode().rstrip("\n")
    if update_golden and actual != shown:
        (ROOT / "README.md").write_text(readme[:m.start(2)] + actual + readme[m.end(2):])
        return
    assert actual == shown, "README example output is stale: pytest --update-golden rewrites it"
