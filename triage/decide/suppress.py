"""The team's `.vtriage.toml`: accepted findings (suppressions) and where runbooks live.

    runbook_url = "https://wiki.example.com/vllm/{verdict}"     # optional: link reports here

    [[ignore]]
    rule = "preemption-observed"                  # a rule that gives a verdict (vtriage rules)
    reason = "nightly batch: preemption is expected"
    expires = 2026-12-31                          # optional: after this date it no longer applies

The first of three files is read: `.vtriage.toml` in the current folder, `.vtriage.toml` at the root of
the git work tree the current folder is in, and the user's own `$XDG_CONFIG_HOME/vtriage/config.toml`
(`~/.config/vtriage/config.toml`). Other parent folders are not searched: a file anyone could leave in
/tmp or a shared mount would change verdicts and CI gates. A file another user owns (root excepted) or that
others may write is skipped with a warning. `--config PATH` names one (used even so, with the warning),
`--no-config` skips them all. A suppressed rule is still
evaluated and listed as SUPPRESSED; it just never decides the verdict (see triage/decide/engine.py).
"""
from __future__ import annotations

import datetime as dt
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .. import tomlread
from ..errors import ConfigError, did_you_mean
from ..model import Suppression
from ..vocabulary import CONFIG_NAME

if TYPE_CHECKING:     # annotations only: importing the rules costs `vtriage --version` its start-up
    from .ruleset import RuleSet

_TOP_KEYS = {"ignore", "runbook_url"}
_IGNORE_KEYS = {"rule", "reason", "expires"}


@dataclass(frozen=True)
class Config:
    path: str | None
    suppressions: tuple[Suppression, ...] = ()
    expired: tuple[Suppression, ...] = ()          # listed in the report's warnings, not applied
    runbook_url: str | None = None


USER_CONFIG = Path("vtriage") / "config.toml"     # under $XDG_CONFIG_HOME, or ~/.config
MAX_CONFIG_BYTES = 1 << 20                        # a team's config is a few lines; read no more than this


def git_root(start: Path) -> Path | None:
    """The folder holding `.git` (a folder, or a worktree's file) at or above `start`; git is not run."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def user_config(env: Mapping[str, str], home: Path) -> Path:
    """The user's own config; a relative XDG_CONFIG_HOME is ignored, as the XDG spec says."""
    base = env.get("XDG_CONFIG_HOME", "")
    return (Path(base) if base and Path(base).is_absolute() else home / ".config") / USER_CONFIG


def config_candidates(cwd: Path, env: Mapping[str, str], home: Path) -> list[Path]:
    """Where a config is looked for, first found first used."""
    here = cwd.absolute()
    found = [here / CONFIG_NAME]
    root = git_root(here)
    if root is not None and root != here:
        found.append(root / CONFIG_NAME)
    found.append(user_config(env, home))
    return found


def distrust(path: Path, euid: int | None) -> str | None:
    """Why `path` must not be trusted, or None: another user (root excepted) owns it, or others may write it
    or, without the sticky bit, replace it in its folder."""
    info = path.stat()
    if euid is not None and info.st_uid not in (euid, 0):
        return f"owned by uid {info.st_uid}, not by you (uid {euid}) or root"
    if info.st_mode & stat.S_IWOTH:
        return f"writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    if info.st_mode & stat.S_IWGRP:
        return f"writable by its group (mode {stat.S_IMODE(info.st_mode):o})"
    folder = path.parent.stat()
    if folder.st_mode & stat.S_IWOTH and not folder.st_mode & stat.S_ISVTX:
        return f"its folder {path.parent} is writable by anyone (no sticky bit)"
    return None


def distrust_warning(path: Path, why: str, skipped: bool) -> str:
    fix = "chown it to yourself" if why.startswith("owned") else \
        f"chmod o-w {path.parent}" if why.startswith("its folder") else f"chmod go-w {path}"
    if skipped:
        return f"{path}: ignored: {why} (hint: {fix}, or pass --config {path} to use it anyway)"
    return f"{path}: {why}; used because --config names it (hint: {fix})"


def effective_uid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def find_config(cwd: Path, env: Mapping[str, str], home: Path) -> tuple[Path | None, tuple[str, ...]]:
    """The config to use and a warning for each one skipped as untrusted."""
    warnings: list[str] = []
    euid = effective_uid()
    for candidate in config_candidates(cwd, env, home):
        try:
            if not candidate.is_file():
                continue
            why = distrust(candidate, euid)
        except OSError:                 # unreadable folder or a file gone: as if it were not there
            continue
        if why is None:
            return candidate, tuple(warnings)
        warnings.append(distrust_warning(candidate, why, skipped=True))
    return None, tuple(warnings)


def _hint(name: str, known: Iterable[str], fallback: str) -> str:
    return did_you_mean(name, known) or fallback


def _line_of(text: str, rule: str, occurrence: int) -> int | None:
    """The line of the n-th `rule = "..."` naming `rule`, so the report can point at it."""
    import regex  # only to point at the line of a bad rule
    pattern = regex.compile(r"^\s*rule\s*=\s*[\"']" + regex.escape(rule) + r"[\"']", regex.M)
    hits = [text.count("\n", 0, m.start()) + 1 for m in pattern.finditer(text)]
    return hits[occurrence] if occurrence < len(hits) else (hits[0] if hits else None)


def _under(rules: RuleSet, node_id: str, ancestor: str) -> bool:
    parent = rules.nodes[node_id].parent
    while parent:
        if parent == ancestor:
            return True
        parent = rules.nodes[parent].parent
    return False


def check_rule(rule: Any, rules: RuleSet, where: str, key: str) -> str:
    """A suppression must name a rule that gives a verdict: a branch would silence a whole subtree."""
    if not isinstance(rule, str) or not rule:
        raise ConfigError(where, key, "must be a rule id (a string)", 'e.g. rule = "preemption-observed"')
    node = rules.nodes.get(rule)
    leaves = sorted(n.id for n in rules.nodes.values() if n.verdict)
    if node is None:
        raise ConfigError(where, key, f"unknown rule {rule!r}", _hint(rule, rules.nodes, "vtriage rules lists them"))
    if not node.verdict:
        below = [n for n in leaves if _under(rules, n, rule)]
        raise ConfigError(where, key, f"{rule!r} is a branch of the tree, not a rule that gives a verdict",
                          f"ignore one of the rules under it: {', '.join(below) or ', '.join(leaves)}")
    return rule


def load_config(path: Path, rules: RuleSet, today: dt.date) -> Config:
    """Read and check one config file; every mistake names the file, the key and a hint."""
    where = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(where, "(file)", f"is {size / 2**20:.1f} MiB; a config is a few lines",
                              f"a config holds suppressions and a runbook URL: under {MAX_CONFIG_BYTES >> 10} KiB")
        text = path.read_text(encoding="utf-8")
        raw = tomlread.loads(text)
    except OSError as exc:
        raise ConfigError(where, "(file)", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(where, "(file)", "not UTF-8 text", "save it as UTF-8") from None
    except tomlread.TOMLDecodeError as exc:
        raise ConfigError(where, "(file)", f"not valid TOML: {exc}", "check quotes and brackets") from None
    except RecursionError:
        raise ConfigError(where, "(file)", "nested too deeply to read", "a config is a few flat tables") from None
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(where, key, "unknown key",
                              _hint(key, _TOP_KEYS, f"allowed: {', '.join(sorted(_TOP_KEYS))}"))
    url = raw.get("runbook_url")
    if url is not None and (not isinstance(url, str) or "{verdict}" not in url):
        raise ConfigError(where, "runbook_url", "must be a string with {verdict} in it",
                          'e.g. runbook_url = "https://wiki.example.com/vllm/{verdict}"')
    entries = raw.get("ignore", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(where, "ignore", "must be a list of tables",
                          'write [[ignore]] then rule = "..." and reason = "..."')
    active: list[Suppression] = []
    expired: list[Suppression] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        key = f"ignore[{i}]"
        for name in entry:
            if name not in _IGNORE_KEYS:
                raise ConfigError(where, f"{key}.{name}", "unknown key",
                                  _hint(name, _IGNORE_KEYS, f"allowed: {', '.join(sorted(_IGNORE_KEYS))}"))
        rule = check_rule(entry.get("rule"), rules, where, f"{key}.rule")
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(where, f"{key}.reason", "missing: say why this finding is accepted",
                              'e.g. reason = "batch window: preemption expected" (it is shown in every report)')
        expires = entry.get("expires")
        if expires is not None and not (isinstance(expires, dt.date) and not isinstance(expires, dt.datetime)):
            raise ConfigError(where, f"{key}.expires", "must be a date", "write it bare, e.g. expires = 2026-12-31")
        line = _line_of(text, rule, seen.get(rule, 0))
        seen[rule] = seen.get(rule, 0) + 1
        item = Suppression(rule, reason.strip(), f"{path.name}:{line}" if line else path.name,
                           expires.isoformat() if expires else None)
        (expired if expires is not None and expires < today else active).append(item)
    return Config(where, tuple(active), tuple(expired), url)


def with_ignored(config: Config, rule_ids: Iterable[str], rules: RuleSet) -> Config:
    """Add the command line's --ignore RULE; a rule already in the file keeps the file's reason."""
    have = {s.rule_id for s in config.suppressions}
    extra = tuple(Suppression(check_rule(r, rules, "--ignore", r), "accepted on the command line", "--ignore")
                  for r in dict.fromkeys(rule_ids) if r not in have)
    return Config(config.path, config.suppressions + extra, config.expired, config.runbook_url)


def expiry_warnings(config: Config) -> tuple[str, ...]:
    return tuple(f"the suppression of {s.rule_id} ({s.origin}) expired on {s.expires}; it no longer applies"
                 for s in config.expired)
