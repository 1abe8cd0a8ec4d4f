"""The network edge: one HTTP GET with timeouts, TLS settings and headers, and every way it can
fail turned into one line that names the URL and says what to try. Used by the live scrape
(triage/metrics/scrape.py) and the Prometheus client (triage/metrics/promapi.py); nothing past them sees the network.
"""
from __future__ import annotations

import socket
import threading
import warnings
from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import regex
import requests

from .. import __version__
from ..errors import InputError
from ..redact import Redactor
from ..vocabulary import MAX_METRICS_BYTES

_SECRET_PARAM = regex.compile(r"(?i)token|key|secret|passw|pass|pwd|auth|sig|credential|^hf$")
_HEADER = regex.compile(r"^\s*(?P<name>[!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*:\s*(?P<value>.*?)\s*$")


MAX_REDIRECTS = 5
_CHUNK = 64 << 10


@dataclass(frozen=True)
class HttpOptions:
    """How to reach an endpoint. Header values are secrets: they never appear in a message."""

    headers: Mapping[str, str] = field(default_factory=dict)
    verify: bool | str = True            # True, False (--insecure) or a CA bundle path (--ca-cert)
    connect_timeout: float = 5.0
    read_timeout: float = 30.0           # for the whole answer, headers and body: a drip cannot hold it open
    max_bytes: int = MAX_METRICS_BYTES   # of the body, decompressed (a gzip bomb stops here)


def parse_header(text: str) -> tuple[str, str]:
    """`--header 'Name: value'` -> (name, value); anything else is a usage error that never shows the value."""
    m = _HEADER.match(text)
    if not m or not m["value"]:
        name = text.split(":", 1)[0].strip() if ":" in text else ""
        shown = repr(name) if name and _HEADER.match(f"{name}: x") else "a header"
        raise InputError("--header", f"{shown} is not 'Name: value' (the rest is not shown: it may be a secret)",
                         "e.g. --header 'Authorization: Bearer TOKEN'")
    return m["name"], m["value"]


def display_url(url: str) -> str:
    """The URL as reports and errors show it: no user:password, secret-looking query values masked."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
    except ValueError:          # not a URL urllib can take apart: mask what looks secret in the text
        return Redactor().text(url)
    if ":" in host.rsplit(":", 1)[0]:
        host = f"[{host.rsplit(':', 1)[0]}]:{host.rsplit(':', 1)[1]}" if parts.port else f"[{host}]"
    query = urlencode([(k, "***" if _SECRET_PARAM.search(k) else v) for k, v in parse_qsl(parts.query, True)],
                      safe="{}=~\":/,*")
    return urlunsplit((parts.scheme, host, parts.path, query, ""))


def origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port: what must stay the same for --header values to be sent (127.0.0.1 and
    localhost are two hosts, as in a browser)."""
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    try:
        port = parts.port or default
    except ValueError:
        port = None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _check_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError as exc:
        raise InputError(display_url(url), f"is not a valid URL ({exc})",
                         "e.g. http://localhost:8000/metrics, http://[::1]:8000/metrics") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise InputError(display_url(url), "is not an http:// or https:// URL",
                         "e.g. http://localhost:8000/metrics")


def get(url: str, options: HttpOptions, what: str, params: Mapping[str, str] | None = None,
        session: requests.Session | None = None) -> requests.Response:
    """GET `url` and read its whole body; every way that fails is an InputError saying what happened.

    The body is streamed: reading stops past `options.max_bytes` (counted after decompression, so a
    gzip bomb stops too) and when the answer, headers and body together, takes longer than
    `options.read_timeout`. `what` names what the URL should be ("a vLLM /metrics endpoint", "a
    Prometheus server") for hints.
    """
    _check_url(url)
    shown = display_url(url)
    headers = {"User-Agent": f"vtriage/{__version__}"}
    allowed = options.connect_timeout + options.read_timeout
    own = session is None
    client = session or requests.Session()
    client.max_redirects = MAX_REDIRECTS
    state: dict = {"size": 0}

    def fetch() -> None:
        try:
            state["response"] = _answer(client, url, params, headers, options, shown, what)
            state["body"] = _body(state["response"], options, shown, what, state)
        except BaseException as exc:  # handed to the caller's thread
            state["error"] = exc

    # The whole answer, headers and body, gets `allowed` seconds: socket timeouts alone let a server
    # that drips a byte now and then hold the read open for ever.
    worker = threading.Thread(target=fetch, name="vtriage-http", daemon=True)
    timed_out = False
    try:
        with warnings.catch_warnings():   # --insecure was asked for: no InsecureRequestWarning on every call
            if options.verify is False:
                warnings.simplefilter("ignore")
            worker.start()
            worker.join(allowed)
            # Decided before the socket is shut: shutting it ends the read with an error of its own, which
            # the reading thread may store before this thread looks again.
            timed_out = worker.is_alive()
    finally:
        if worker.is_alive():
            _abandon(state.get("response"))
        if own:
            client.close()
    if timed_out:
        if "response" not in state:
            raise InputError(shown, f"connected, but no answer within {allowed:g} s",
                             "the server may be overloaded; raise --read-timeout")
        got = f" ({state['size']:,} bytes read)" if state["size"] else ""
        raise InputError(shown, f"answered, but the body was not complete after {allowed:g} s{got}",
                         "the server is too slow or stuck; raise --read-timeout")
    if "error" in state:
        raise state["error"]
    response = state["response"]
    response._content = state["body"]     # requests' own cache of the body: .text and .json() read it
    if response.status_code in (401, 403):
        raise InputError(shown, f"HTTP {response.status_code} {response.reason or ''}".rstrip(),
                         "it needs credentials: --header 'Authorization: Bearer TOKEN'"
                         + (" (or set VLLM_API_KEY)" if "vLLM" in what else ""))
    if response.status_code == 404:
        raise InputError(shown, "HTTP 404 Not Found", f"check the path: {what}")
    if response.status_code >= 400 and not _is_api_error(response):
        raise InputError(shown, f"HTTP {response.status_code} {response.reason or ''}".rstrip(),
                         f"check that the URL is {what} and that it is healthy")
    return response


def _answer(client: requests.Session, url: str, params: Mapping[str, str] | None, headers: Mapping[str, str],
            options: HttpOptions, shown: str, what: str) -> requests.Response:
    """The status line and headers; the body is left to `_body`.

    Redirects are followed here rather than by requests: requests drops only Authorization on the way to
    another host, and --header carries any credential (X-Api-Key, Cookie, ...). The user's headers go only
    to the origin (scheme, host, port) the user named.
    """
    home = origin(url)
    target, query = url, params
    try:
        for _ in range(MAX_REDIRECTS + 1):
            sent = {**headers, **options.headers} if origin(target) == home else dict(headers)
            response = client.get(target, params=query, headers=sent, verify=options.verify, stream=True,
                                  timeout=(options.connect_timeout, options.read_timeout), allow_redirects=False)
            location = client.get_redirect_target(response)
            if location is None:
                return response
            response.close()
            target, query = urljoin(response.url, location), None   # the query is already in the new URL
        raise requests.exceptions.TooManyRedirects()
    except requests.exceptions.SSLError:
        raise InputError(shown, "TLS certificate verification failed",
                         "pass the server's CA with --ca-cert FILE, or --insecure to skip verification") from None
    except requests.exceptions.ConnectTimeout:
        raise InputError(shown, f"no connection within {options.connect_timeout:g} s",
                         "check the host and port, and any firewall; "
                         "raise --connect-timeout on a slow network") from None
    except requests.exceptions.ReadTimeout:
        raise InputError(shown, f"connected, but no answer within {options.read_timeout:g} s",
                         "the server may be overloaded; raise --read-timeout") from None
    except requests.exceptions.TooManyRedirects:
        raise InputError(shown, f"redirects in a loop (more than {MAX_REDIRECTS})",
                         f"give the final URL of {what}") from None
    except requests.exceptions.ConnectionError as exc:
        text = str(exc)
        if "Name or service not known" in text or "getaddrinfo" in text or "nodename nor servname" in text:
            raise InputError(shown, "cannot resolve the host name",
                             "check the spelling, or use an IP address") from None
        raise InputError(shown, "connection refused or reset",
                         f"is {what} listening there? for a pod: kubectl port-forward pod/NAME PORT:PORT") from None
    except (requests.exceptions.RequestException, ValueError) as exc:
        raise InputError(shown, f"request failed: {type(exc).__name__}", f"check the URL of {what}") from None


def _body(response: requests.Response, options: HttpOptions, shown: str, what: str, state: dict) -> bytes:
    """The whole body, decompressed, within the byte cap (`state["size"]` says how far it got)."""
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_content(_CHUNK):
            size += len(chunk)
            state["size"] = size
            if size > options.max_bytes:
                raw = response.raw.tell() if hasattr(response.raw, "tell") else size
                bomb = bool(response.headers.get("Content-Encoding")) and raw * 20 < size
                raise InputError(shown, f"answered with more than {options.max_bytes >> 20:,} MiB"
                                 + (f" from {raw / 2**20:,.1f} MiB compressed: a decompression bomb" if bomb else ""),
                                 f"point at {what}; raise --max-bytes if this server's answer really is that large")
            chunks.append(chunk)
    except requests.exceptions.ContentDecodingError:
        raise InputError(shown, f"answered with a body that does not decompress "
                         f"({response.headers.get('Content-Encoding', '')})", f"check the URL of {what}") from None
    except requests.exceptions.ConnectionError as exc:
        if "timed out" in str(exc).lower():
            raise InputError(shown, f"answered, but the body stalled for {options.read_timeout:g} s "
                             f"({size:,} bytes read)",
                             "the server is too slow or stuck; raise --read-timeout") from None
        raise InputError(shown, f"the connection was cut while the body was read ({size:,} bytes so far)",
                         "try again; is the server restarting?") from None
    except requests.exceptions.RequestException as exc:
        raise InputError(shown, f"the body could not be read: {type(exc).__name__} ({size:,} bytes so far)",
                         f"check the URL of {what}") from None
    finally:
        response.close()
    return b"".join(chunks)


def _abandon(response: requests.Response | None) -> None:
    """Stop a read that ran out of time: shut its socket so the reading thread ends too."""
    if response is None:
        return
    sock = getattr(getattr(getattr(getattr(response.raw, "_fp", None), "fp", None), "raw", None), "_sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _is_api_error(response: requests.Response) -> bool:
    """Prometheus answers a bad query with 400/422 and a JSON body saying why; the caller reads it."""
    return response.status_code in (400, 422, 503) and "json" in response.headers.get("Content-Type", "")
