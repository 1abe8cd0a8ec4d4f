"""Errors the user can act on. Each renders as one line: where, what, and a hint."""
from __future__ import annotations

from typing import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """The hint 'did you mean ...?' when one of `known` is close to `name`, else "". difflib is imported here, when
    an error is made: a run without one never loads it."""
    import difflib
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {close[0]!r}?" if close else ""


class TriageError(Exception):
    """Base class: `str()` is the one-line message shown to the user."""

    exit_code = 2


class InputError(TriageError):
    """An input that cannot be read: missing, a directory, binary, malformed metrics."""

    def __init__(self, where: str, what: str, hint: str = "") -> None:
        self.where, self.what, self.hint = where, what, hint
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.where}: {self.what}"
        return f"{text} (hint: {self.hint})" if self.hint else text


class NotEnoughInput(InputError):
    """An input that reads fine but lacks the figures asked of it: the "inconclusive" exit code, 3."""

    exit_code = 3


class RuleError(TriageError):
    """A rules or signatures file that is not valid: names the file, the key and a hint."""

    def __init__(self, path: str, key: str, reason: str, hint: str = "") -> None:
        self.path, self.key, self.reason, self.hint = path, key, reason, hint
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.path}: {self.key}: {self.reason}"
        return f"{text} (hint: {self.hint})" if self.hint else text


class ConfigError(RuleError):
    """A .vtriage.toml that is not valid: the file, the key, what is wrong and a hint, like a rule file."""
