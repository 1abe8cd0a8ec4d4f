"""One vocabulary across formats and commands: the same words for one idea, verdict titles that
agree, figures a person reads (no float's every digit, no "1 lines"), and Markdown that renders."""
from __future__ import annotations

import re
from html import unescape

import click
import pytest
from markdown_it import MarkdownIt

from triage.cli import cli
from triage.decide.ruleset import load_rules

from conftest import FIXTURES, ROOT, run_cli

INPUTS = ROOT / "tests" / "reports" / "inputs"
UNCHECKED = FIXTURES / "logs" / "v0-old" / "kv_cache_too_small-mistral-7b-32k-3090-util085.log"
STORM = [FIXTURES / "metrics" / f"v1-0.30-qwen3-32b-h200-recompute-storm-{i}.prom" for i in (1, 2)]


def _formats(*args: str) -> dict[str, str]:
    return {fmt: run_cli("--format", fmt, *args).stdout.decode() for fmt in ("text", "markdown", "html")}


def test_a_fix_the_model_could_not_check_is_unchecked_in_every_format():
    shown = _formats(str(UNCHECKED))
    for fmt, text in shown.items():
        assert "unchecked" in text, fmt
        assert "re-checked" not in text.replace("re-checked against the capacity model", ""), fmt


@pytest.mark.parametrize("case", sorted(p.stem for p in INPUTS.glob("*.log")))
def test_the_verdict_has_one_title_in_every_format(case):
    shown = {fmt: unescape(text) for fmt, text in _formats(str(INPUTS / f"{case}.log")).items()}
    title = load_rules().classes[case].heading
    assert shown["text"].startswith(title.upper() + "  (")             # WEIGHTS DON'T FIT, not WEIGHTS DONT FIT
    assert shown["markdown"].startswith(f"### vtriage: {title} (")
    assert f"<h1>{title}</h1>" in shown["html"]


def test_predicted_results_render_as_their_own_lines_in_commonmark():
    """`   _Predicted:_ ...` under a list item ran into the fix's sentence: one paragraph in CommonMark."""
    md = run_cli("--format", "markdown", str(UNCHECKED)).stdout.decode()
    html = MarkdownIt("commonmark").render(md)
    fixes = re.search(r"<h4>Fix</h4>.*?<ol>(.*?)</ol>", html, re.S).group(1)
    before = re.findall(r"(.{4})predicted: ", fixes, re.I | re.S)
    assert len(before) == 3 and set(before) == {"<li>"}, before        # each its own item, none inside a sentence


def test_figures_are_written_for_reading_in_every_format():
    args = [str(p) for m in STORM for p in ("--metrics", m)]
    shown = _formats(*args)
    facts = re.findall(r'<th scope="row"><code>(\w+)</code></th>\s*<td class="value"[^>]*>([^<]*)</td>', shown["html"])
    names = {name for name, _ in facts}
    assert {"ttft_p95_seconds", "queue_time_p95_seconds", "prompt_tokens_p50"} <= names, names
    for name, value in facts:
        assert not re.search(r"\d\.\d{3,}", value), (name, value)            # 0.1667 seconds, 803.6 tokens
        if name.endswith("_seconds"):
            assert re.fullmatch(r"[\d,.]+ s", value.strip()), (name, value)
        if name.startswith(("prompt_tokens", "generation_tokens")):
            assert re.fullmatch(r"[\d,]+ tokens?", value.strip()), (name, value)
    for fmt, text in shown.items():
        assert not re.search(r"\b1 (lines|tokens|requests|preemptions|groups|instances)\b|\w\(s\)", text), fmt


def test_every_command_that_chooses_a_format_says_format():
    for name, command in cli.commands.items():
        options = {opt for p in command.params for opt in p.opts if not getattr(p, "hidden", False)}
        assert "--json" not in options, name
        if "-o" in options and name != "alerts":           # alerts' formats are two YAML shapes
            assert "--format" in options, name
    assert run_cli("gpu", "--help").stdout.decode().count("--json") == 0


def test_version_and_exit_codes_read_the_same_in_every_help():
    texts = {name: run_cli(name, "--help").stdout.decode() for name in ("check", "alerts")}
    assert all("--vllm-version X.Y.Z" in t for t in texts.values())
    whatif = " ".join(run_cli("whatif", "--help").stdout.decode().split())
    check = " ".join(texts["check"].split())
    for text in (whatif, check):
        assert "2 usage or input error" in text and "3 " in text
    assert isinstance(cli, click.Group)


def test_the_reasoning_names_failures_and_phases_in_words_not_ids(kit):
    """Ruled-out reasons and findings are read by people: 'it failed during weight loading', never the
    ids rules and JSON use (cuda_oom, loading_weights, kv_cache_allocation)."""
    from triage.vocabulary import FAILURE_KINDS, PHASES

    from conftest import diagnose_files
    ids = re.compile(r"\b(" + "|".join(sorted(w for w in FAILURE_KINDS | set(PHASES) if "_" in w)) + r")\b")
    logs = sorted((FIXTURES / "logs").rglob("*.log"))
    assert len(logs) > 50
    for log in logs:
        d = diagnose_files(kit, log).diagnosis
        prose = [r.reason for r in d.ruled_out + d.not_assessed] + [f.summary for f in d.findings] \
            + [f.why for f in d.findings]
        for text in prose:
            assert not ids.search(text), (log.name, text)
