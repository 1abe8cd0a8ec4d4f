"""What input text can do to a report: file names and lines with newlines, fences, HTML, control and
bidirectional characters. Markdown, HTML and the terminal text show them as visible escapes, JSON as
\\u escapes (the same strings to a parser); a newline in a file name cannot close a code fence."""
from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from conftest import run_cli

KV = ("(EngineCore_DP0 pid=310) ERROR 09-30 10:01:21 [core.py:708] ValueError: To serve at least one request with the "
      "models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
      "available KV cache memory "
      "(7.22 GiB). Based on the available memory, the estimated maximum model length is 59136. Try increasing "
      "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
BIDI = "\u202e"          # RIGHT-TO-LEFT OVERRIDE: "gnp.exe" reads as "exe.png"
UNSAFE = ["\u202e", "\u2066", "\u2069", "\u200f", "\x1b", "\x07", "\x85", "\x7f", "\u2028"]
INJECTED = "<img src=x onerror=alert(1)><svg onload=alert(2)>"     # a file name holds no /


def _log(tmp_path: Path, name: str, extra: str = "") -> Path:
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {'model': "
                    f"'acme/m{BIDI}lmth.exe', 'max_model_len': 131072}}\n"
                    f"(APIServer pid=1) WARNING 09-30 10:00:03 [envs.py:1] odd {extra} text\n" + KV + f" {extra}\n")
    return path


def _outputs(path: Path) -> dict[str, str]:
    out = {}
    for fmt in ("markdown", "html", "json", "text"):
        result = run_cli("--format", fmt, "--no-config", str(path))
        assert result.returncode == 1, result.stderr
        out[fmt] = result.stdout.decode()
    return out


def test_a_newline_in_a_file_name_cannot_close_the_fence(tmp_path):
    name = f"x\n```\n{INJECTED}\n```\n.log"
    out = _outputs(_log(tmp_path, name))
    tokens = MarkdownIt("commonmark", {"html": True}).enable("table").parse(out["markdown"])
    raw = [t.content for t in tokens if t.type == "html_block"] + \
          [c.content for t in tokens if t.children for c in t.children if c.type == "html_inline"]
    assert raw and not [r for r in raw if "onerror" in r or "onload" in r], "raw HTML got out of a fence"
    fences = [t for t in tokens if t.type == "fence"]
    assert any("\\x0a```\\x0a" in t.content for t in fences), "the name is shown, on one line, inside the fence"
    assert "<img" not in out["html"] and "<svg onload" not in out["html"] and "&lt;img src=x" in out["html"]


@pytest.mark.parametrize("char", UNSAFE)
def test_control_and_bidi_characters_are_never_printed_raw(tmp_path, char):
    path = _log(tmp_path, f"a{char}b.log", extra=f"left{char}right")
    out = _outputs(path)
    for fmt in ("markdown", "html", "json", "text"):     # text: no ESC or BEL reaches the terminal either
        assert char not in out[fmt], f"{char!r} raw in {fmt}"
    shown = f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    assert shown in out["markdown"] and shown in out["html"]
    # JSON escapes them, so a parser gets the input's own text back
    data = json.loads(out["json"])
    assert data["inputs"][0]["path"] == str(path)
    assert any(f"left{char}right" in g["example"]["text"] for g in data["unrecognised"])


def test_backticks_in_a_line_get_a_longer_fence(tmp_path):
    path = _log(tmp_path, "six``````ticks.log")
    md = _outputs(path)["markdown"]
    tokens = MarkdownIt("commonmark").parse(md)
    fences = [t for t in tokens if t.type == "fence"]
    assert any("six``````ticks.log:3" in t.content for t in fences) and all(len(t.markup) >= 7 for t in fences
                                                                          if "``````" in t.content)


def test_colour_inside_a_docker_json_envelope_is_stripped(tmp_path):
    """docker json-file escapes the colour codes vLLM writes; unstripped, most vLLM lines were missed."""
    lines = [
        r'{"log":"\u001b[0;36m(APIServer pid=1)\u001b[0;0m INFO 09-30 10:00:02 [utils.py:328] non-default args: '
        r'{\u0027model\u0027: \u0027m\u0027, \u0027max_model_len\u0027: '
        r'131072}\n","stream":"stdout","time":"2025-09-30T10:00:02.1Z"}',
        json.dumps({"log": "\x1b[0;36m(EngineCore_DP0 pid=310)\x1b[0;0m " + KV.split(") ", 1)[1] + "\n",
                    "stream": "stderr", "time": "2025-09-30T10:01:21.1Z"}),
    ]
    path = tmp_path / "docker.log"
    path.write_text("\n".join(lines) + "\n")
    data = json.loads(run_cli("--format", "json", str(path)).stdout)
    assert data["verdict"] == "kv_cache_too_small"
    assert data["facts"]["max_model_len"]["value"] == 131072
    assert data["inputs"][0]["lines_recognised"] == 2 and data["inputs"][0]["vllm_lines"] == 2


# Terminal controls input can carry to stderr: an OSC that retitles the terminal (and, in some, writes files),
# a bell, a right-to-left override. Errors quote file names, bad /metrics lines and HTTP reason phrases.
OSC = "\x1b]0;pwned\x07"
RAW_ON_STDERR = ("\x1b", "\x07", "\u202e", "\x9b")


def _assert_neutral(stderr: bytes) -> None:
    text = stderr.decode("utf-8", "replace")
    assert text.startswith("vtriage: error: ") and text.endswith("\n") and text.count("\n") == 1, text
    assert not [c for c in RAW_ON_STDERR if c in text], repr(text)
    assert "\\x1b]0;pwned\\x07" in text, "shown as escapes, so the user still sees what the input held"


def test_a_file_name_cannot_drive_the_terminal(tmp_path):
    result = run_cli(str(tmp_path / f"a{OSC}b{BIDI}.log"))
    assert result.returncode == 2
    _assert_neutral(result.stderr)


def test_a_bad_metrics_line_cannot_drive_the_terminal(tmp_path):
    metrics = tmp_path / "m.prom"
    metrics.write_text(f'# TYPE x gauge\nx{{a{OSC}{BIDI}="b"}} 1\n')
    result = run_cli("--metrics", str(metrics))
    assert result.returncode == 2 and b"not a valid Prometheus metrics line" in result.stderr
    _assert_neutral(result.stderr)


class _HostileReason(http.server.BaseHTTPRequestHandler):
    """Answers with a status line whose reason phrase holds an OSC, a bell, an RLO and a C1 CSI (as raw bytes:
    http.server would refuse them)."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        reason = OSC.encode() + " \u202e".encode() + b" \x9b2J unavailable"
        self.wfile.write(b"HTTP/1.1 503 " + reason + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def test_an_http_reason_phrase_cannot_drive_the_terminal():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostileReason)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = run_cli("--metrics-url", f"http://127.0.0.1:{server.server_address[1]}/metrics", "--samples", "1")
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 2 and b"503" in result.stderr, result.stderr
    _assert_neutral(result.stderr)
