"""--metrics-url and --prometheus against a server that fights back: a gzip bomb, a body of gigabytes,
a million series, a drip of one byte at a time, a redirect loop, headers that never end. Each ends
in one line that says what happened, within a time and memory bound (generous: the machine is
shared and noisy; unbounded, these took gigabytes and minutes)."""
from __future__ import annotations

import gzip
import http.server
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from hostile_support import run_measured

HEALTHY = (Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
           / "v1-0.11.1-llama31-8b-h100-healthy.prom").read_bytes()
GZIP_MEMBER = gzip.compress(b"a" * (64 << 20), 9)     # 64 MiB in ~64 KiB; repeated, a 6 GiB bomb


def _series(count: int) -> Iterator[bytes]:
    yield b"# TYPE vllm:num_requests_running gauge\n"
    for start in range(0, count, 10_000):
        yield b"".join(b'vllm:num_requests_running{engine="%d",model_name="m"} 1\n' % i
                       for i in range(start, min(count, start + 10_000)))


class Hostile(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:        # quiet
        pass

    def _send(self, status: int, headers: dict, body: Iterator[bytes], pause: float = 0.0) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for chunk in body:
                self.wfile.write(chunk)
                self.wfile.flush()
                if pause:
                    time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass                                  # the client gave up, as it should

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?")[0]
        if path == "/metrics":
            self._send(200, {"Content-Type": "text/plain; version=0.0.4", "Content-Length": str(len(HEALTHY))},
                       iter([HEALTHY]))
        elif path == "/bomb":          # Content-Encoding: gzip, 6 GiB when decoded
            self._send(200, {"Content-Type": "text/plain", "Content-Encoding": "gzip",
                             "Content-Length": str(len(GZIP_MEMBER) * 96)}, iter([GZIP_MEMBER] * 96))
        elif path == "/huge":          # 2 GiB of plain body
            self._send(200, {"Content-Type": "text/plain", "Content-Length": str(2 << 30)},
                       (b"vllm:x 1\n" * (1 << 17) for _ in range((2 << 30) // (9 << 17) + 1)))
        elif path == "/many":          # a million series in 60 MB, to the end of the connection
            self.close_connection = True
            self._send(200, {"Content-Type": "text/plain", "Connection": "close"}, _series(1_000_000))
        elif path == "/drip":          # a byte at a time, for ever
            self._send(200, {"Content-Type": "text/plain", "Content-Length": str(1 << 20)},
                       (b"#" for _ in range(1 << 20)), pause=0.2)
        elif path == "/loop":
            self._send(302, {"Location": "/loop", "Content-Length": "0"}, iter([]))
        elif path == "/slow-headers":  # a status line, then headers that never end
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            try:
                for i in range(10_000):
                    self.wfile.write(b"X-Drip-%d: 1\r\n" % i)
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
        elif path == "/api/v1/query_range":   # a Prometheus whose answer never stops growing
            self._send(200, {"Content-Type": "application/json"},
                       iter([b'{"status":"success","data":{"resultType":"matrix","result":['] +
                            [b'{"metric":{"__name__":"vllm:num_requests_running"},"values":[[1,"1"]]},'
                             * 10_000] * 2000))
        else:
            self._send(404, {"Content-Length": "0"}, iter([]))


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _scrape(url: str, *extra: str, read_timeout: int = 60):
    """One scrape. A test of a byte cap leaves the read timeout long, so that only the cap can end it: on a
    loaded machine, reading 64 MiB can take longer than a short timeout, and the timeout would answer first."""
    return run_measured("--metrics-url", url, "--samples", "1", "--connect-timeout", "2",
                        "--read-timeout", str(read_timeout), *extra, limit_s=180)


def _one_line(run, *needles: str) -> str:
    assert run.returncode == 2, (run.returncode, run.stderr, run.seconds)
    err = run.stderr
    assert err.startswith("vtriage: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "connection refused or reset" not in err, "a wrong reason"
    for needle in needles:
        assert needle in err, err
    return err


def test_the_server_itself_is_fine(server):
    run = _scrape(f"{server}/metrics", "--format", "json")
    assert run.returncode in (0, 1, 3), run.stderr


def test_a_gzip_bomb_stops_at_the_byte_cap(server):
    run = _scrape(f"{server}/bomb")
    _one_line(run, "more than 64 MiB", "decompression bomb")
    assert run.seconds < 60 and run.peak_mib < 600, (run.seconds, run.peak_mib)


def test_a_huge_body_stops_at_the_byte_cap(server):
    run = _scrape(f"{server}/huge")
    _one_line(run, "more than 64 MiB", "--max-bytes")
    assert run.seconds < 60 and run.peak_mib < 600, (run.seconds, run.peak_mib)


def test_max_bytes_sets_the_cap(server):
    _one_line(_scrape(f"{server}/huge", "--max-bytes", "1MiB"), "more than 1 MiB")


def test_a_million_series_are_refused_before_they_are_parsed(server):
    run = _scrape(f"{server}/many", "--max-bytes", "256MiB")
    _one_line(run, "1,000,000 samples")
    assert run.seconds < 90 and run.peak_mib < 900, (run.seconds, run.peak_mib)


def test_a_drip_trips_the_read_timeout(server):
    run = _scrape(f"{server}/drip", read_timeout=4)
    _one_line(run, "not complete after 6 s", "--read-timeout")
    assert run.seconds < 40, run.seconds


def test_headers_that_never_end_trip_the_read_timeout(server):
    run = _scrape(f"{server}/slow-headers", read_timeout=4)
    _one_line(run, "no answer within 6 s")
    assert run.seconds < 40, run.seconds


def test_a_redirect_loop_is_named(server):
    run = _scrape(f"{server}/loop")
    _one_line(run, "redirects in a loop")
    assert run.seconds < 40, run.seconds


def test_a_prometheus_answer_without_end_is_capped(server):
    run = run_measured("--prometheus", server, "--read-timeout", "60", limit_s=180)
    _one_line(run, "more than 64 MiB")
    assert run.seconds < 90 and run.peak_mib < 700, (run.seconds, run.peak_mib)
