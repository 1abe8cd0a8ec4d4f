"""The Markdown and HTML reports as a reader gets them: golden snapshots of what they say, and the promises
that matter on a ticket (self-contained, log text stays text, unknown is never zero, small for huge logs).

Regenerate the snapshots on purpose only: pytest tests/test_reports.py --update-golden
"""
from __future__ import annotations

import base64
import difflib
import hashlib
import json
import re
from html import escape as html_escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from triage import __version__

from conftest import ROOT, run_cli

REPORTS = ROOT / "tests" / "reports"
INPUTS = REPORTS / "inputs"
GOLDEN = REPORTS / "golden"
CASES = sorted(p.stem for p in INPUTS.glob("*.log"))
EXIT = {"healthy": 0, "inconclusive": 3}


def vtriage(*args: str, cwd: Path = INPUTS) -> tuple[int, str]:
    result = run_cli(*args, cwd=cwd)
    assert result.stderr == b"", result.stderr.decode()
    return result.returncode, result.stdout.decode("utf-8")


BLOCKS = {"p", "div", "h1", "h2", "h3", "h4", "li", "tr", "section", "header", "footer", "figure", "figcaption",
          "details", "summary", "pre", "table", "thead", "tbody", "ul", "ol", "article", "main", "body"}


class PageText(HTMLParser):
    """What a reader sees: text only, one line per block, no CSS or script."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("style", "script"):
            self.skip += 1
        if tag in BLOCKS or tag in ("td", "th", "br"):
            self.parts.append("\n" if tag in BLOCKS or tag == "br" else " ")

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self.skip -= 1
        if tag in BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.skip:
            if self.lasttag == "script":
                self.scripts.append(data)
            return
        self.parts.append(re.sub(r"\s+", " ", data))

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line) + "\n"


def parse(html: str) -> PageText:
    page = PageText()
    page.feed(html)
    page.close()
    return page


def check_golden(name: str, actual: str, update: bool) -> None:
    actual = actual.replace(__version__, "<version>")
    path = GOLDEN / name
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: run pytest --update-golden and review it"
    expected = path.read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), str(path), "now"))
    assert actual == expected, f"the report changed (pytest --update-golden if on purpose):\n{diff}"


@pytest.mark.parametrize("case", CASES)
def test_markdown_snapshot(case, update_golden):
    code, markdown = vtriage("--format", "markdown", f"{case}.log")
    assert code == EXIT.get(case, 1)
    check_golden(f"{case}.md", markdown, update_golden)


@pytest.mark.parametrize("case", CASES)
def test_html_text_snapshot(case, update_golden):
    code, html = vtriage("--format", "html", f"{case}.log")
    assert code == EXIT.get(case, 1)
    check_golden(f"{case}.html.txt", parse(html).text(), update_golden)


def test_every_verdict_has_a_snapshot_input():
    from triage.vocabulary import VERDICTS
    assert sorted(CASES) == sorted(VERDICTS)


@pytest.mark.parametrize("case", CASES)
def test_html_loads_nothing_from_outside(case):
    _, html = vtriage("--format", "html", f"{case}.log")
    page = parse(html)
    tags = [t for t, _ in page.tags]
    for banned in ("link", "img", "iframe", "object", "embed", "base", "video", "audio", "source", "form"):
        assert banned not in tags, banned
    for tag, attrs in page.tags:
        assert "src" not in attrs and "srcset" not in attrs, tag
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        if "href" in attrs:
            assert tag == "a" and re.match(r"#|https://", attrs["href"] or ""), (tag, attrs)
    style = html[html.index("<style>"):html.index("</style>")]
    assert "@import" not in style and "@font-face" not in style
    assert all(url.startswith("#") for url in re.findall(r"url\(([^)]*)\)", style))
    # one inline script, and the page's policy allows that script and nothing else to run or load
    assert tags.count("script") == 1 and len(page.scripts) == 1
    csp = next(a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    digest = base64.b64encode(hashlib.sha256(page.scripts[0].encode()).digest()).decode()
    assert "default-src 'none'" in csp and f"script-src 'sha256-{digest}'" in csp


def test_html_is_deterministic_and_has_no_clock():
    first = vtriage("--format", "html", "preemption_slowdown.log")[1]
    assert first == vtriage("--format", "html", "preemption_slowdown.log")[1]
    assert not re.search(r"20\d\d-\d\d-\d\d", first)


@pytest.mark.parametrize("name", ["injected-exception.log", "injected-command.log"])
def test_log_text_cannot_become_html(name):
    """Prompts and exception messages reach the report; `<script>` in them must stay text."""
    _, html = vtriage("--format", "html", name, cwd=REPORTS)
    page = parse(html)
    assert [t for t, _ in page.tags].count("script") == 1
    assert "img" not in [t for t, _ in page.tags]
    assert "<script>window.__pwned=1</script>" in page.text()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;window.__pwned" in html
    assert "sk-live-abcdefghijklmnopqrstuvwxyz" not in html        # redacted as everywhere else
    _, markdown = vtriage("--format", "markdown", name, cwd=REPORTS)
    rendered = parse(MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown))
    assert {t for t, _ in rendered.tags} <= {"h3", "h4", "p", "strong", "em", "code", "pre", "ol", "ul", "li", "a",
                                             "details", "summary", "table", "thead", "tbody", "tr", "th", "td", "sub"}
    assert "sk-live-abcdefghijklmnopqrstuvwxyz" not in markdown
    assert "<img src=" in rendered.text()                 # the WARNING line is shown, as text


def test_injected_command_is_shown_verbatim():
    _, html = vtriage("--format", "html", "injected-command.log", cwd=REPORTS)
    command = re.sub(r"</?span[^>]*>", "", re.search(r"<code id=\"command\">(.*?)</code>", html).group(1))
    # the model name is one shell word, quoted, and only ever text
    assert command == "vllm serve &#39;&lt;script&gt;window.__pwned=1&lt;/script&gt;&#39; --max-model-len 17440"


@pytest.mark.parametrize("case", CASES)
def test_markdown_renders_cleanly_as_gfm(case):
    code, markdown = vtriage("--format", "markdown", f"{case}.log")
    _, data = vtriage("--format", "json", f"{case}.log")
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    page = parse(html)
    tags = [t for t, _ in page.tags]
    assert tags[0] == "h3" and "details" in tags and "summary" in tags
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    assert rows and all(len(re.findall(r"<t[hd]>", row)) == 3 for row in rows)
    command = json.loads(data)["command"]
    if command:
        assert f'<pre><code class="language-sh">{html_escape(command, quote=False)}\n</code></pre>' in html


def test_markdown_escapes_tables_and_code_spans():
    from triage.render.markdown import cell, code_span, prose
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    row = f"| {cell(code_span('a|b `c` d'))} | {cell(prose('<b>x</b> & [y](http://z) | w'))} |"
    html = md.render("| h1 | h2 |\n|---|---|\n" + row + "\n")
    cells = re.findall(r"<td>(.*?)</td>", html)
    assert cells == ["<code>a|b `c` d</code>", "&lt;b&gt;x&lt;/b&gt; &amp; [y](http://z) | w"]


def test_unknown_figures_are_labelled_unknown_never_zero():
    _, html = vtriage("--format", "html", "kv_cache_too_small.log")
    text = parse(html).text()
    assert "GPU total unknown" in text
    assert re.search(r"CUDA graphs unknown", text)
    assert "Unknown (not in the input, so not drawn; never zero): GPU total, budget, CUDA graphs" in text
    assert "0.00 GiB" not in text                         # nothing absent was filled in as zero
    _, html = vtriage("--format", "html", "inconclusive.log")
    assert "The input gives no GPU memory figure" in parse(html).text()


def test_memory_picture_per_rank_and_the_failed_allocation():
    _, html = vtriage("--format", "html", "weights_dont_fit.log")
    text = parse(html).text()
    assert "Worker_TP1 pid=403 failed unknown unknown 44.19 GiB" in text
    assert "Worker_TP0 pid=402 unknown unknown 43.65 GiB" in text
    assert 'class="seg-attempt"' in html and "The allocation that failed 0.44 GiB" in text


def test_timeline_charts_and_the_failure_mark():
    _, html = vtriage("--format", "html", "other_failure.log")
    assert html.count('class="failure-line"') == 2       # KV usage and requests; V0 lines count no preemptions
    assert "failure comes after the last stats line" in parse(html).text()
    _, html = vtriage("--format", "html", "preemption_slowdown.log")
    for series in ("series-kv area", "series-running line", "series-waiting line", "series-preemptions bars"):
        assert f'class="series {series}" d="M' in html
    assert 'class="failure-line"' not in html              # nothing failed: nothing to mark


def test_metrics_snapshots_make_the_timeline_when_the_log_has_none():
    metrics = ROOT / "fixtures" / "metrics"
    args = ("--metrics", str(metrics / "v1-preempting-0.prom"), "--metrics", str(metrics / "v1-preempting-1.prom"))
    data = json.loads(vtriage("--format", "json", *args)[1])
    assert [(p["kv_cache_usage"], p["running"], p["waiting"], p["preemptions"]) for p in data["timeline"]] == [
        (0.9912, 212, 57, None), (0.9987, 208, 93, 18954 - 18211)]
    _, html = vtriage("--format", "html", *args)
    assert "2 /metrics snapshots, one step each." in parse(html).text()
    assert 'class="series series-preemptions bars"' in html


def test_html_to_stdout_and_to_a_file(tmp_path):
    code, stdout = vtriage("--format", "html", "healthy.log")
    assert code == 0 and stdout.startswith("<!DOCTYPE html>") and stdout.rstrip().endswith("</html>")
    out = tmp_path / "report.html"
    code, printed = vtriage("--format", "html", "-o", str(out), "healthy.log")
    assert code == 0 and printed == "" and out.read_text(encoding="utf-8") == stdout


def test_a_huge_log_still_makes_a_small_page(tmp_path):
    """Stats every 10 s for days, thousands of odd warnings, a 200 KB exception line: the page stays small."""
    lines = ["(APIServer pid=1) INFO 11-18 09:00:00 [api_server.py:1896] vLLM API server version 0.11.1",
             "(APIServer pid=1) INFO:     Application startup complete."]
    for i in range(12000):
        lines.append(f"(APIServer pid=1) INFO 11-18 {i // 360 % 24:02d}:{i // 6 % 60:02d}:{i % 6 * 10:02d} "
                     f"[loggers.py:236] Engine 000: Avg prompt throughput: 900.0 tokens/s, Avg generation throughput: "
                     f"500.0 tokens/s, Running: {20 + i % 7} reqs, Waiting: {i % 40} reqs, Preemptions: {i % 5}, "
                     f"GPU KV cache usage: {90 + i % 10}.0%, Prefix cache hit rate: 1.0%")
        if i % 4 == 0:
            lines.append(f"(APIServer pid=1) WARNING 11-18 09:00:00 [w{i}.py:{i}] odd thing {'x' * (i % 50)} here")
    lines.append("(EngineCore_DP0 pid=7) ERROR 11-18 23:59:59 [core.py:710] ValueError: bad prompt " + "A" * 200_000)
    log = tmp_path / "huge.log"
    log.write_text("\n".join(lines) + "\n")
    _, html = vtriage("--format", "html", str(log))
    assert len(html.encode()) < 250_000
    assert "A" * 2001 not in html                         # one line is capped too
    assert html.count('<li class="line">') < 80
    assert re.search(r"and \d+ more groups", html)


def test_text_and_json_still_work_alongside():
    code, text = vtriage("external_pressure.log")
    assert code == 1 and text.startswith("EXTERNAL MEMORY PRESSURE")
    code, data = vtriage("--format", "json", "external_pressure.log")
    assert code == 1 and '"verdict": "external_pressure"' in data


def test_reports_page_shows_real_screenshots():
    page = (ROOT / "docs" / "reports.md").read_text()
    images = re.findall(r"!\[[^\]]+\]\((img/[^)]+\.png)\)", page)
    assert len(images) >= 3
    for image in images:
        png = ROOT / "docs" / image
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 300_000, image


ON_CALL_FIXTURE = ROOT / "fixtures" / "logs" / "v1" / "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log"
ENGINES = ROOT / "fixtures" / "metrics" / "v1-0.11.1-llama31-70b-dp2-engine1-preempting.prom"


@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_ticket_formats_carry_the_on_call_context(tmp_path, fmt):
    """What the terminal says about suppressions, the time window, severity and the runbook, the ticket says too."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".vtriage.toml").write_text('[[ignore]]\nrule = "preemption-observed"\nreason = "nightly batch"\n'
                                            'expires = 2999-01-01\n')
    code, out = vtriage("--format", fmt, str(ON_CALL_FIXTURE), "--ignore", "oom-unplaced",
                        "--since", "14:03", "--until", "14:06", cwd=tmp_path)
    text = parse(out).text() if fmt == "html" else out
    assert code == 1
    assert "severity warning" in text.replace(":", "")
    assert "Window: 2026-05-11 14:03:00 to 2026-05-11 14:06:00: 18 of 79 recognised log records inside" in text
    assert re.search(r"SUPPRESSED\W+preemption-observed\W+→ preemption_slowdown", text)
    assert "accepted: nightly batch" in text and ".vtriage.toml:2" in text and "until 2999-01-01" in text
    assert re.search(r"Did not fire: \W*oom-unplaced\W+\(\W*--ignore", text)
    assert re.search(r"Runbook: \W*docs/runbooks/preemption_slowdown.md", text)


@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_ticket_formats_show_every_instance_of_a_fleet(fmt):
    code, out = vtriage("--format", fmt, "--metrics", str(ENGINES))
    text = parse(out).text() if fmt == "html" else out
    assert code == 1
    assert "2 instances from" in text
    healthy = next(line for line in text.splitlines() if "engine=0" in line)
    storm = next(line for line in text.splitlines() if "engine=1" in line and "5210" in line)
    assert "healthy" in healthy and "KV max 46%" in healthy
    assert "preemption_slowdown" in storm or "preemption_slowdown" in text.split("engine=1", 1)[1][:200]
    assert "stands out: preempting: 5210 preemptions" in text
    assert "(1 healthy, 1 preemption_slowdown)" in text
