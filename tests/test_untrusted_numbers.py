"""Figures from outside (a Prometheus answer, a model's config.json, .vtriage.toml) are checked before they
are used: a wrong shape or an absurd number is one line naming where, the key, the value and a hint,
exit 2, never a traceback, an overflow or a run that eats the machine."""
from __future__ import annotations

import http.server
import json
import threading

import pytest

from conftest import FIXTURES, run_cli

KV = str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")


def _one_line_error(result) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b"", (result.returncode, err)
    assert err.startswith("vtriage: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "(hint: " in err, err
    return err


# --- a Prometheus answer ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prometheus():
    """A server that answers every query_range with the body the test put in `answer`."""
    answer = {"body": b"{}"}

    class Fake(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"])

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answer
    finally:
        httpd.shutdown()
        httpd.server_close()


def _matrix(result) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


SERIES = {"__name__": "vllm:num_requests_running", "pod": "p"}


@pytest.mark.parametrize("body,needle", [
    (_matrix({"a": 1}), "data.result is an object, not a list"),
    ([1, 2], "the answer is a list, not an object"),
    ({"status": 1}, "status is a number, not a string"),
    ({"status": "success"}, "data is missing"),
    ({"status": "success", "data": [1]}, "data is a list, not an object"),
    ({"status": "success", "data": {"resultType": "matrix"}}, "data.result is missing"),
    (_matrix([1]), "data.result[0] is a number, not an object"),
    (_matrix([{"metric": [1], "values": []}]), "data.result[0].metric is a list, not an object"),
    (_matrix([{"metric": {"__name__": 5}, "values": []}]), "data.result[0].metric.__name__ is a number, not a string"),
    (_matrix([{"metric": SERIES}]), "data.result[0].values is missing"),
    (_matrix([{"metric": SERIES, "values": 5}]), "data.result[0].values is a number, not a list"),
    (_matrix([{"metric": SERIES, "values": [[1]]}]), "data.result[0].values[0] is not a [time, \"value\"] pair"),
    (_matrix([{"metric": SERIES, "values": [[1, [2]]]}]), "data.result[0].values[0] is not a [time, \"value\"] pair"),
    (_matrix([{"metric": SERIES, "values": [["x", "1"]]}]), "data.result[0].values[0] is not a [time, \"value\"]"),
    ({**_matrix([{"metric": SERIES, "values": [[1, "1"]]}]), "warnings": 5}, "warnings is a number, not a list"),
])
def test_a_prometheus_answer_of_the_wrong_shape_is_one_line(prometheus, body, needle):
    url, answer = prometheus
    answer["body"] = json.dumps(body).encode()
    err = _one_line_error(run_cli("--prometheus", url, "--since", "5m"))
    assert f"{url}/api/v1/query_range" in err and needle in err, err
