"""--header values (tokens) go only to the origin the user named: a redirect to another scheme, host or
port gets the request without them, as requests does for Authorization."""
from __future__ import annotations

import http.server
import threading

import pytest

from conftest import FIXTURES, run_cli

HEALTHY = (FIXTURES / "metrics" / "v1-0.11.1-llama31-8b-h100-healthy.prom").read_bytes()
SECRET = "Bearer s3cr3t-redirect-t0ken"


def _serve(handler: type[http.server.BaseHTTPRequestHandler]):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture()
def servers():
    """`first` redirects /elsewhere to `second` on another port and under the name localhost, and
    /here to its own /metrics; both record the headers of every request."""
    seen: list[tuple[str, dict[str, str]]] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append((f"{self.server.server_address[1]}{self.path}", dict(self.headers.items())))
            target = {"/elsewhere": f"http://localhost:{second.server_address[1]}/metrics",
                      "/here": "/metrics"}.get(self.path)
            if target:
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(HEALTHY)))
            self.end_headers()
            self.wfile.write(HEALTHY)

    first, second = _serve(Recorder), _serve(Recorder)
    try:
        yield f"http://127.0.0.1:{first.server_address[1]}", second.server_address[1], seen
    finally:
        for httpd in (first, second):
            httpd.shutdown()
            httpd.server_close()


def _scrape(url: str):
    return run_cli("--metrics-url", url, "--samples", "1", "--header", f"Authorization: {SECRET}",
                   "--header", "X-Team-Token: t0ken-2", "--format", "json")


def test_headers_are_dropped_on_a_redirect_to_another_host(servers):
    first, second_port, seen = servers
    result = _scrape(f"{first}/elsewhere")
    assert result.returncode in (0, 1, 3), result.stderr.decode()
    at_first, at_second = seen[0][1], seen[1][1]
    assert seen[1][0].startswith(str(second_port))
    assert at_first.get("Authorization") == SECRET and at_first.get("X-Team-Token") == "t0ken-2"
    assert "Authorization" not in at_second and "X-Team-Token" not in at_second, at_second


def test_headers_follow_a_redirect_on_the_same_origin(servers):
    first, _, seen = servers
    result = _scrape(f"{first}/here")
    assert result.returncode in (0, 1, 3), result.stderr.decode()
    assert [path.split("/", 1)[1] for path, _ in seen] == ["here", "metrics"]
    assert all(headers.get("Authorization") == SECRET and headers.get("X-Team-Token") == "t0ken-2"
               for _, headers in seen)


def test_headers_are_dropped_on_a_redirect_to_another_port_of_the_same_host(servers):
    first, second_port, seen = servers
    result = _scrape(f"{first}/elsewhere".replace("127.0.0.1", "localhost"))    # localhost on both ends
    assert result.returncode in (0, 1, 3), result.stderr.decode()
    assert seen[1][0].startswith(str(second_port))
    assert seen[0][1].get("X-Team-Token") == "t0ken-2"
    assert "Authorization" not in seen[1][1] and "X-Team-Token" not in seen[1][1], seen[1][1]
