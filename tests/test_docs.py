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


def test_the_performance_tables_ratios_are_its_own_columns_divided():
    """docs/performance.md's bench table (bench/table.py's output): each vtriage row's `x grep` is its wall and
    CPU over grep's in the same input's rows, as bench/run.py computes them (where grep's time, wall or CPU, is
    not so small that its two decimals lose the ratio)."""
    import re
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    table = text[text.index("<!-- bench:start -->"):text.index("<!-- bench:end -->")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and "---" not in line and not line.startswith("| input")]
    grep, checked = None, 0
    for row in reversed(rows):          # grep's row follows vtriage's within an input
        if row[1] == "`grep -cE`":
            grep = (float(row[2]), float(row[3]))
        elif row[1] == "**`vtriage`**" and row[5] and grep is not None and grep[0] >= 0.1:  # else rounded away
            wall_x, cpu_x = (float(re.sub(r"\*", "", cell)) for cell in row[5:7])
            assert abs(wall_x - float(row[2]) / grep[0]) < 0.05 * wall_x + 0.02, row
            if grep[1] >= 0.1:          # grep's CPU on a small log rounds away too
                assert abs(cpu_x - float(row[3]) / grep[1]) < 0.05 * cpu_x + 0.02, row
            checked += 1
    assert checked >= 4
