"""Keep secrets that vLLM logs (API keys in its args, Hugging Face tokens, bearer headers, URL
passwords, cloud keys) out of every report, and count what was hidden.

Two stages mask, with the same rules. Lines are masked as they are read (logs/parse.py), before a long line is
clipped to what a report shows (a clipped secret would no longer match) and while the lines before a line are
known (a PEM key's body, an env value under its name). Then `redacted_report` is the choke point: every string
of the finished Report (file names, samples, warnings, the command, facts) passes it before any renderer sees
it. The command line's stderr (errors, warnings, progress) passes `Redactor.text` in cli.py's one writer.
"""
from __future__ import annotations

import bisect
import dataclasses
import re
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from .model import Report, SourceRef

try:
    import ahocorasick_rs
except ImportError:      # no wheel for this platform: the regex below does the same, slower
    ahocorasick_rs = None  # type: ignore[assignment]  # checked before use

MASK = "***"

# A secret is found by its name (an assignment, a flag, a header) or by its shape (a vendor's token
# format, URL credentials, a PEM block). Each rule yields (kind, start, end) spans to mask; every
# pattern here is linear in the line (a hostile line must not make redaction the slow step).
_QUOTED = r"""'(?:[^'\\\n]|\\.){0,8192}'|"(?:[^"\\\n]|\\.){0,8192}\""""   # bounded: one unclosed quote
                                                                        # per name must not scan the line each time
# Names that hold secrets: *PASSWORD*/*PASSWD* anywhere; *_KEY, *_TOKEN, *_SECRET, *_PASS, *_PWD,
# *_CREDENTIALS, *_AUTH as the last word (VLLM_API_KEY, GITHUB_TOKEN, SECRET_KEY, REDIS_PASS), any case.
_SECRET_NAME = (r"(?:[\w.-]*?passw(?:or)?d[\w.-]*"
                r"|(?:[\w.-]*?[_.-])?(?:api[_-]?key|apikey|key|token|secret|pass|pwd|credentials?|auth))(?![\w.-])")
_ESCAPED_QUOTES = r"""\\'(?:[^'\\\n]|\\[^']){0,8192}\\'|\\"(?:[^"\\\n]|\\[^"]){0,8192}\\\""""  # \"...\"
_VALUE = rf"(?P<value>\[[^\[\]\n]{{0,8192}}\]|{_QUOTED}|{_ESCAPED_QUOTES}|['\"]?[^\s'\",;)\]}}]+)"
_ASSIGNED = re.compile(rf"(?i)(?<![\w.-])(?P<name>{_SECRET_NAME})(?:\\?['\"])?\s*[=:]\s*{_VALUE}")
_FLAG = re.compile(rf"(?i)(?<![\w-])--(?P<name>{_SECRET_NAME})(?:=|\s+)(?!-)(?P<value>{_QUOTED}|[^\s'\",;)\]}}]+)")
_ELEMENT = re.compile(rf"{_QUOTED}|[^\s,\[\]'\"]+")
_NOT_SECRET = frozenset({"none", "null", "true", "false", "", "***", "'***'", '"***"', "<redacted>", "[redacted]"})

_AUTHORIZATION = re.compile(
    r"(?i)(?<![\w-])(?:proxy-)?authorization['\"]?\s*[=:]\s*(?:(?P<q>['\"])|(?!['\"]))"
    r"(?:(?:basic|bearer|token|digest|negotiate|ntlm|hoba|mutual|aws4-hmac-sha256|apikey|sso-key)\s+)?"
    r"(?P<secret>(?(q)(?:[^'\"\\\n]|\\.)+|[^\n]+))")
_PEM = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?P<secret>(?:(?!-----END ).)+)", re.S)
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:'\"]*:(?P<secret>[^\s/@'\"]+)@")
_URL_TOKEN_USER = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?P<secret>[A-Za-z0-9_-]{20,})@")
_BARE_USER_PASSWORD = re.compile(   # admin:hunter2@db.internal:5432, user:pw@host/model (no scheme)
    r"(?<![\w/:.@+-])[\w.+-]+:(?P<secret>[^\s/@:'\"]+)@(?=[\w-]+(?:\.[\w-]+)*(?:[:/\s'\",;)}\]]|$))")
_URL_NAME = r"[?&;][\w.-]*?(?:token|key|secret|pass|pwd|sig|credential|auth|hf)[\w.-]*="   # the pre-filter's too
_URL_PARAM = re.compile(rf"(?i){_URL_NAME}(?P<secret>[^&\s'\"#<>]+)")

# An argument list as Python prints it: ['vllm', 'serve', '--api-key', 'KEY'] (the flag and its value two elements).
_ARGV = re.compile(rf"(?i)(?P<q>\\?['\"])--(?P<name>{_SECRET_NAME})(?P=q)\s*,\s*"
                   rf"(?P<value>{_QUOTED}|{_ESCAPED_QUOTES})")
# ASGI headers as Starlette and uvicorn print them: (b'x-api-key', b'KEY'), (b'authorization', b'Basic KEY').
_HEADER_TUPLE = re.compile(
    rf"(?i)\(\s*b?(?P<q>['\"])(?P<name>{_SECRET_NAME}|(?:proxy-)?authorization|(?:set-)?cookie)(?P=q)\s*,\s*"
    rf"b?(?P<value>{_QUOTED})")
_AUTH_SCHEME = re.compile(r"(?i)(?:basic|bearer|token|digest|negotiate|ntlm|hoba|mutual|aws4-hmac-sha256|apikey"
                          r"|sso-key)\s+")
# Cookie and Set-Cookie headers: every cookie's value (a session is a credential), not Set-Cookie's attributes.
_COOKIE = re.compile(r"(?i)(?<![\w-])(?:set-)?cookie['\"]?\s*[=:]\s*(?:(?P<q>['\"])|(?!['\"]))"
                     r"(?P<value>(?(q)(?:[^'\"\\\n]|\\.){1,8192}|[^\n]{1,8192}))")
_COOKIE_PAIR = re.compile(r"(?:^|;)\s*(?P<name>[^=;\s]+)=(?P<value>\"[^\"]*\"|[^;\s,\"\\]+)")
_COOKIE_ATTRIBUTES = frozenset({"path", "domain", "expires", "max-age", "samesite", "priority"})
# An environment variable given as a name and a value: {"name": "API_KEY", "value": "KEY"} (Kubernetes' env
# list as JSON or YAML flow), {'name': ..., 'value': ...}, V1EnvVar(name='HF_TOKEN', value='KEY').
_ENV_PAIR = re.compile(rf"(?i)(?<!\w)(?P<nq>(?:\\?['\"])?)name(?P=nq)\s*[:=]\s*(?P<q>(?:\\?['\"])?)"
                       rf"(?P<name>{_SECRET_NAME})(?P=q)\s*,\s*(?P<vq>(?:\\?['\"])?)value(?P=vq)\s*[:=]\s*{_VALUE}")
# Command lines that take a password their own way: curl -u user:PASS (wget --user), mysql -pPASS.
_USER_PASSWORD = re.compile(r"(?<![\w-])(?:-u +|--user(?:\s+|=))(?P<q>['\"]?)[^\s:'\"]+:(?P<secret>[^\s'\"@]+)")
_MYSQL_PASSWORD = re.compile(r"(?<![\w-])(?i:mysql|mariadb|mysqldump|mysqladmin|mysqlimport)(?![\w-])[^\n]{0,1024}?"
                             r"(?<![\w-])-p(?P<secret>[^\s'\"-][^\s'\"]*)")
# Connection strings (Azure storage and Service Bus, ODBC, ADO.NET): Name=VALUE up to the `;`, spaces included,
# or {VALUE} in braces as ODBC quotes it.
_CONNECTION = re.compile(r"(?i)(?<![\w.-])(?P<name>AccountKey|SharedAccessKey|SharedAccessSignature|Password|Pwd)"
                         r"\s*=\s*(?P<secret>\{[^}\n]{0,8192}\}|[^;\n'\"]{1,256}(?=;)|[^;\s'\"]+)")

# (kind, pattern): shapes vendors issue, wherever they stand.
_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("bearer_token", re.compile(r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})")),
    ("hf_token", re.compile(r"(?<![A-Za-z0-9_])(?P<secret>hf_(?=[a-z]*[A-Z0-9])[A-Za-z0-9]{8,})(?![A-Za-z0-9_])")),
    ("openai_key", re.compile(r"(?<![\w-])(?P<secret>sk-[A-Za-z0-9_-]{12,})")),
    ("github_token", re.compile(
        r"(?<![A-Za-z0-9_])(?P<secret>gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("gitlab_token", re.compile(r"(?<![A-Za-z0-9_])(?P<secret>glpat-[A-Za-z0-9_-]{16,})")),
    ("slack_token", re.compile(r"(?<![A-Za-z0-9_])(?P<secret>xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,})")),
    ("google_api_key", re.compile(r"(?<![A-Za-z0-9_])(?P<secret>AIza[0-9A-Za-z_-]{30,})")),
    ("aws_key", re.compile(r"(?<![A-Z0-9])(?P<secret>(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA|ABIA|ACCA)"
                           r"[A-Z0-9]{16})(?![A-Z0-9])")),
    ("jwt", re.compile(r"(?<![\w-])(?P<secret>eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,})")),
)
# Every rule needs one of these in the lower-cased line; most log lines have none and skip the rest.
# Each alternative is what one rule above cannot match without (a test checks this on generated lines):
# a bare `token` would send every stats line (`tokens/s`) through all of them.
_SECRET_WORDS = ("key", "token", "secret", "pass", "pwd", "credential", "credentials", "auth")
_URL_WORDS = ("sig", "hf")                   # only as a URL parameter's name
_LITERALS = ("passw", "authorization", "bearer", "private key", "@",                  # names, headers, PEM, users
             "cookie", "-u ", "--user", "mysql", "mariadb", "sharedaccesssignature",         # commands, strings
             "hf_", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat", "glpat", "xox", "xapp", "aiza",
             "eyj", "akia", "asia", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "apka", "abia", "acca")
_WORD = "(?:" + "|".join(_SECRET_WORDS) + ")"
_AFTER_NAME = r"""(?:(?:\\?['"])?\s*[=:]|\\?['"]\s*,)"""        # _ASSIGNED: name = value; _HEADER_TUPLE, _ENV_PAIR
_FLAG_NAME = rf"--[\w.-]*?{_WORD}(?![\w.-])"                                  # _FLAG: --name value
_QUICK = re.compile(rf"{_WORD}{_AFTER_NAME}|{_FLAG_NAME}|{_URL_NAME}|" + "|".join(map(re.escape, _LITERALS)))

# The same test in one pass of an Aho-Corasick automaton (a regex alternation costs ~14 µs a line that
# holds none of them; this ~2 µs), the name-based rules checked only where a name word stands.
_AFTER_NAME_AT = re.compile(_AFTER_NAME)
_FLAG_NAME_AT, _URL_NAME_AT = re.compile(_FLAG_NAME), re.compile(_URL_NAME)   # each alone: a literal prefix
_TRIGGERS = ahocorasick_rs.AhoCorasick([*_LITERALS, *_SECRET_WORDS, *_URL_WORDS]) if ahocorasick_rs else None
_FIRST_WORD, _FIRST_URL_WORD = len(_LITERALS), len(_LITERALS) + len(_SECRET_WORDS)


def may_hold_secret(text: str) -> bool:
    """Whether any redaction rule could match `text`: exactly `_QUICK.search(text.lower())`, faster."""
    low = text.lower()
    if _TRIGGERS is None:
        return _QUICK.search(low) is not None
    words = False
    for index, _, end in _TRIGGERS.find_matches_as_indexes(low, overlapping=True):
        if index < _FIRST_WORD or index < _FIRST_URL_WORD and _AFTER_NAME_AT.match(low, end):
            return True
        words = True
    return words and ("--" in low and _FLAG_NAME_AT.search(low) is not None
                      or ("?" in low or "&" in low or ";" in low) and _URL_NAME_AT.search(low) is not None)


def _name_kind(name: str) -> str:
    """What an assigned secret is called in the counts, from its name."""
    name = name.lower().lstrip("-").replace("-", "_")
    if "hugging_face" in name or name.startswith("hf_") and name.endswith("token"):
        return "hf_token"
    if "aws" in name:
        return "aws_key"
    if "api_key" in name or "apikey" in name:
        return "api_key"
    if "pass" in name or name.endswith("pwd"):
        return "password"
    if name.endswith("token"):
        return "token"
    return "secret"


# Names that prose uses too: "bytes per token: about 56,096". vtriage's own sentences are masked for what they quote
# (`redacted_report`), so there a lowercase word after one of these and a colon is a word, not a credential.
_PROSE_NAMES = frozenset({"token", "key", "secret", "auth", "pass", "credential", "credentials"})
# What vtriage's sentences put where a secret goes: a flag ("credentials: --header"), an explanation ("--api-key
# (a secret the log hides)"), a placeholder ("Bearer TOKEN", "<token>").
_PLACEHOLDER = re.compile(r"--|\(|(?:[A-Z]{2,12}|<[\w-]{1,30}>)(?![\w-])")


def _value_spans(m: re.Match[str], prose: bool = False) -> list[tuple[int, int]]:
    """Where to mask an assigned value: inside its quotes, or every element of a list."""
    value, start = m["value"], m.start("value")
    if value.startswith("["):
        spans = [(start + e.start(), start + e.end()) for e in _ELEMENT.finditer(value, 1, len(value) - 1)]
    else:
        spans = [(start, start + len(value))]
    out = []
    for a, b in spans:
        if b - a >= 4 and value[a - start] == "\\" and value[a - start + 1] in "'\"":
            a, b = a + 2, b - 2
        elif b - a >= 2 and value[a - start] in "'\"" and value[b - start - 1] == value[a - start]:
            a, b = a + 1, b - 1
        found = m.string[a:b].strip()
        if found.lower() in _NOT_SECRET or found.startswith(MASK) or found == m["name"].lstrip("-"):
            continue      # nothing, masked already, or code passing a variable on (token=token)
        if found.isdigit() and len(found) < 8 and _name_kind(m["name"]) != "password":
            continue      # a count (max_prompt_adapter_token=0), not a credential
        if prose and found.isalpha() and found.islower() and m["name"].lower() in _PROSE_NAMES \
                and ":" in m.string[m.end("name"):a]:
            continue      # "per token: about"
        out.append((a, b))
    return out


def _secret_spans(text: str, prose: bool = False) -> list[tuple[str, int, int]]:
    """Every secret in `text` as (kind, start, end); later rules may overlap earlier ones (the first wins).
    `prose`: `text` is vtriage's own sentence (see _PROSE_NAMES)."""
    spans: list[tuple[str, int, int]] = []
    for m in _PEM.finditer(text):
        spans.append(("private_key", *m.span("secret")))
    for kind, pattern in _SHAPES[:1]:
        spans.extend((kind, *m.span("secret")) for m in pattern.finditer(text))
    for m in _AUTHORIZATION.finditer(text):
        spans.append(("authorization", *m.span("secret")))
    for pattern in (_URL_PASSWORD, _URL_TOKEN_USER, _BARE_USER_PASSWORD):
        spans.extend(("url_password", *m.span("secret")) for m in pattern.finditer(text))
    for m in _CONNECTION.finditer(text):        # before a URL parameter: `;Password=` is one too, cut at a space
        if m["secret"].strip().lower() not in _NOT_SECRET:
            spans.append((_name_kind(m["name"]), *m.span("secret")))
    for m in _URL_PARAM.finditer(text):
        spans.append(("url_param", *m.span("secret")))
    spans.extend(_header_spans(text))
    for pattern in (_USER_PASSWORD, _MYSQL_PASSWORD):
        spans.extend(("password", *m.span("secret")) for m in pattern.finditer(text)
                     if not m["secret"].isdigit())      # docker -u 1000:1000 is a uid and gid
    for pattern in (_ARGV, _ENV_PAIR, _ASSIGNED, _FLAG):
        for m in pattern.finditer(text):
            kind = _name_kind(m["name"])
            spans.extend((kind, a, b) for a, b in _value_spans(m, prose))
    for kind, pattern in _SHAPES[1:]:
        spans.extend((kind, *m.span("secret")) for m in pattern.finditer(text))
    if prose:
        spans = [span for span in spans if not _PLACEHOLDER.match(text, span[1])]
    return spans


def _header_spans(text: str) -> list[tuple[str, int, int]]:
    """Header values in ASGI tuples (an Authorization's scheme kept) and every cookie's value."""
    spans: list[tuple[str, int, int]] = []
    for m in _HEADER_TUPLE.finditer(text):
        name = m["name"].lower()
        if "cookie" in name:
            kind = "cookie"
        elif "authorization" in name:
            kind = "authorization"
        else:
            kind = _name_kind(name)
        for a, b in _value_spans(m):
            scheme = _AUTH_SCHEME.match(text, a, b) if kind == "authorization" else None
            spans.append((kind, scheme.end() if scheme else a, b))
    for m in _COOKIE.finditer(text):
        value, start = m["value"], m.start("value")
        for pair in _COOKIE_PAIR.finditer(value):
            if pair["name"].lower() not in _COOKIE_ATTRIBUTES:
                a, b = pair.span("value")
                if value[a] == '"':
                    a, b = a + 1, b - 1
                spans.append(("cookie", start + a, start + b))
    return spans


_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = "-----END "
_PEM_BODY = re.compile(r"\s*(?P<secret>[A-Za-z0-9+/=]{1,1024})\s*")
_ENV_NAME_LINE = re.compile(rf"(?i)\s*(?:-\s*)?name\s*:\s*(?P<q>['\"]?)(?P<name>{_SECRET_NAME})(?P=q)\s*")
_ENV_NAME_START = re.compile(rf"(?i)name\s*:\s*['\"]?{_SECRET_NAME}")
_ENV_VALUE_LINE = re.compile(r"\s*value\s*:\s*(?P<value>[^\n]{0,8192}\S)\s*")
PEM_LINES = 512      # a 16384-bit RSA key is some 200 lines; past this many the END line was lost
ENV_LINES = 3        # the value follows its name, perhaps after a line of another process


class LineContext:
    """What a log's earlier lines say about the next ones, for secrets no line shows on its own: the body lines of a
    PEM private key (each alone is only base64) and the `value:` under a Kubernetes env entry named like a secret.
    One per log, fed every record in order; interleaved lines of other processes neither end nor join a block."""

    def __init__(self) -> None:
        self.pem_left = 0           # lines still read as a key's body
        self.env_left = 0           # lines in which a `value:` is the named secret's
        self.env_name = ""

    # The words `spans` asks for before it may open a block on a line (a search led by literals, fast).
    OPENING = re.compile("-----BEGIN |name|NAME|Name")

    def idle_over(self, text: str) -> bool:
        """Whether `spans` of each line of `text` would find nothing and leave this as it is: no block is open and
        no line may open one (holds the words, and for a named secret the start of what _ENV_NAME_LINE reads)."""
        if self.pem_left or self.env_left or "-----BEGIN " in text:
            return False
        return not (("name" in text or "NAME" in text or "Name" in text) and _ENV_NAME_START.search(text))

    def spans(self, message: str) -> list[tuple[str, int, int]]:
        """The secrets in `message` that the lines before it reveal, as (kind, start, end); remembers what this
        line reveals about the next."""
        found: list[tuple[str, int, int]] = []
        if self.pem_left:
            self.pem_left -= 1
            end = message.find(_PEM_END)
            if end >= 0:
                self.pem_left = 0
                body = _PEM_BODY.fullmatch(message, 0, end)
                if body:
                    found.append(("private_key", *body.span("secret")))
            else:
                body = _PEM_BODY.fullmatch(message)
                if body:
                    found.append(("private_key", *body.span("secret")))
        elif "-----BEGIN " in message:
            begins = list(_PEM_BEGIN.finditer(message))
            if begins and _PEM_END not in message[begins[-1].end():]:
                self.pem_left = PEM_LINES
        if self.env_left:
            self.env_left -= 1
            value = _ENV_VALUE_LINE.fullmatch(message)
            if value:
                self.env_left = 0
                a, b = value.span("value")
                if b - a >= 2 and message[a] in "'\"" and message[b - 1] == message[a]:
                    a, b = a + 1, b - 1
                if message[a:b].lower() not in _NOT_SECRET:
                    found.append((_name_kind(self.env_name), a, b))
        if "name" in message or "NAME" in message or "Name" in message:
            named = _ENV_NAME_LINE.fullmatch(message)
            if named:
                self.env_left, self.env_name = ENV_LINES, named["name"]
        return found


# Prompt and completion text in request logging, dumps and request errors (--redact-prompts).
_PROMPTS = (
    ("prompt",
     re.compile(r"""(?:\bprompt|'prompt'|"prompt"|\boutput|'content'|"content")\s*[:=]\s*(?P<q>['"])(?P<secret>(?:\\.|(?!(?P=q)).)*)(?P=q)""")),
    ("prompt", re.compile(r"\bprompt(?:_token)?_ids\s*[:=]\s*\[(?P<secret>[^\[\]]*)\]")),   # stops at a [: linear
)
_QUICK_PROMPT = re.compile(r"(?i)prompt|output|content")


JOINED_TEXTS = 2048       # texts `leaves_alone_each` asks about at once


class Redactor:
    """Masks secrets (and, when asked, prompts); `counts` says which kinds were hidden and how often."""

    def __init__(self, enabled: bool = True, prompts: bool = False) -> None:
        self.enabled = enabled
        self.prompts = prompts
        self.counts: Counter[str] = Counter()
        self._clean: set[str] = set()      # short field values known to hold nothing to mask ("v1", a model name)

    def leaves_alone(self, text: str) -> bool:
        """Whether no rule could touch `text`: `redact_mapped` would give it back as it is, counting nothing. The
        prompt rules are asked where the quick test finds one of their words: a /metrics line naming prompt or
        output tokens holds none, and would otherwise be kept whole in every snapshot (metrics/thinning.py)."""
        return not (self.enabled and may_hold_secret(text)) and not (
            self.prompts and _QUICK_PROMPT.search(text) and any(pattern.search(text) for _, pattern in _PROMPTS))

    def leaves_alone_each(self, texts: Sequence[str]) -> list[bool]:
        """`leaves_alone` of each text, asked of JOINED_TEXTS of them joined at a time: texts none of which holds
        anything a rule could touch hold nothing joined either (a /metrics snapshot has 20k lines; joined whole,
        their matches would take MiBs). Only a batch that may hold something is asked line by line."""
        out: list[bool] = []
        for start in range(0, len(texts), JOINED_TEXTS):
            batch = texts[start:start + JOINED_TEXTS]
            out += [True] * len(batch) if self.leaves_alone("\n".join(batch)) else map(self.leaves_alone, batch)
        return out

    def redact_mapped(self, text: str, known: Sequence[tuple[str, int, int]] = (),
                      prose: bool = False) -> tuple[str, Callable[[int], int]]:
        """Redact `text`, and the `known` spans (what a LineContext found); also return a function mapping offsets
        in `text` to offsets in the result. `prose`: `text` may be vtriage's own sentence (see _PROSE_NAMES)."""
        found: list[tuple[str, int, int]] = []
        if self.enabled:
            found.extend(known)
            if may_hold_secret(text):
                found.extend(_secret_spans(text, prose))
        if self.prompts and _QUICK_PROMPT.search(text):
            found.extend((kind, *m.span("secret")) for kind, pattern in _PROMPTS for m in pattern.finditer(text))
        if not found:
            return text, _same
        cuts: list[tuple[int, int]] = []        # sorted, never overlapping: the first rule to find a span wins
        for kind, start, end in found:
            at = bisect.bisect_left(cuts, (start, end))
            if start >= end or text[start:end] == MASK or (at and cuts[at - 1][1] > start) \
                    or (at < len(cuts) and cuts[at][0] < end):
                continue
            cuts.insert(at, (start, end))
            self.counts[kind] += 1
        if not cuts:
            return text, lambda pos: pos
        out, shifts, last = [], [], 0
        for start, end in cuts:
            out.append(text[last:start])
            out.append(MASK)
            shifts.append((start, end, len(MASK) - (end - start)))
            last = end
        out.append(text[last:])

        def mapper(pos: int) -> int:
            delta = 0
            for start, end, change in shifts:
                if pos >= end:
                    delta += change
                elif pos > start:
                    return start + delta + min(pos - start, len(MASK))
            return pos + delta
        return "".join(out), mapper

    def text(self, text: str, known: Sequence[tuple[str, int, int]] = ()) -> str:
        return self.redact_mapped(text, known)[0]

    def fields(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The fields of a line whose text was already redacted (and counted): masked, not counted twice."""
        out = dict(fields)
        unread = [key for key, value in out.items() if isinstance(value, str) and value not in self._clean]
        if not unread:
            return out            # a stats line: numbers only, nothing to copy the counts for
        counts = self.counts.copy()
        for key in unread:
            value = out[key]
            masked = self.text(value)
            if masked == value and len(value) <= _CLEAN_MAX and len(self._clean) < _CLEAN_CAP:
                self._clean.add(value)           # nothing to mask now, nothing ever: the same text, the same answer
            out[key] = masked
        self.counts = counts
        return out


_CLEAN_MAX, _CLEAN_CAP = 200, 10_000


def redacted_report(report: Report, redactor: Redactor) -> Report:
    """`report` with every string in it masked, however deep (a new field is covered without a change here), and
    its `redactions` the redactor's counts. A string met again is masked once and counted once: a file name
    stands in every evidence line's place."""
    if not (redactor.enabled or redactor.prompts):
        return report
    masked: dict[str, str] = {}

    def text(value: str) -> str:
        if value not in masked:
            masked[value] = value if redactor.leaves_alone(value) else redactor.redact_mapped(value, prose=True)[0]
        return masked[value]

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return text(value)
        if isinstance(value, SourceRef):      # the span is an offset into the text: it moves with the masks
            path = text(value.path)
            shown, moved = redactor.redact_mapped(value.text, prose=True)
            if path is value.path and shown == value.text:
                return value
            span = (moved(value.span[0]), moved(value.span[1])) if value.span else None
            return SourceRef(path, value.line, shown, span)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changed = {}
            for f in dataclasses.fields(value):
                old = getattr(value, f.name)
                new = walk(old)
                if new is not old:
                    changed[f.name] = new
            return dataclasses.replace(value, **changed) if changed else value
        if isinstance(value, (tuple, list)):
            items = [walk(item) for item in value]
            if all(new is old for new, old in zip(items, value)):
                return value
            return type(value)(items) if type(value) in (tuple, list) else type(value)(*items)
        if isinstance(value, Mapping):
            pairs = [(walk(k), walk(v)) for k, v in value.items()]
            if all(k is old_k and v is old_v for (k, v), (old_k, old_v) in zip(pairs, value.items())):
                return value
            return dict(pairs)
        return value

    report = dataclasses.replace(walk(dataclasses.replace(report, redactions={})), redactions=dict(redactor.counts))
    return report


def _same(pos: int) -> int:
    return pos


def clip(text: str, span: tuple[int, int] | None, limit: int) -> tuple[str, tuple[int, int] | None]:
    """Shorten `text` to about `limit` characters around `span`, marking cuts with an ellipsis."""
    if len(text) <= limit:
        return text, span
    start, end = span if span else (0, 0)
    room = max(0, limit - (end - start))
    left = max(0, start - room // 3)
    right = min(len(text), max(end, left + limit))
    head = "…" if left > 0 else ""
    tail = "…" if right < len(text) else ""
    clipped = head + text[left:right] + tail
    if span is None:
        return clipped, None
    shift = len(head) - left
    return clipped, (start + shift, min(end, right) + shift)
