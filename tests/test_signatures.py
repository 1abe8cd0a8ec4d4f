"""Every log signature matches its own sample lines, and no other signature claims them."""
from __future__ import annotations

import re
from re import _constants as sc
from re import _parser as sp
from typing import Any, Callable

import pytest

from triage.errors import RuleError
from triage.logs.envelope import records
from triage.logs.signature_files import repeats_a_varying_group
from triage.logs.signatures import load_signatures
from triage.ruletests import sample_problem

from conftest import RULES_DIR

SIGNATURES = load_signatures(RULES_DIR / "signatures")
CASES = [(sig, sample) for sig in SIGNATURES.signatures for sample in sig.samples]


@pytest.mark.parametrize("sig,sample", CASES, ids=[f"{s.id}:{i}" for s in SIGNATURES.signatures
                                                   for i in range(len(s.samples))])
def test_sample_matches_its_signature_only(sig, sample):
    """A sample line is recognised by its signature; other matches must be declared in `also` (the
    check `vtriage rules --test` runs)."""
    problem = sample_problem(SIGNATURES, sig, sample, first=sample == sig.samples[0])
    assert problem is None, f"{sig.id}: {problem}: {sample}"


@pytest.mark.parametrize("sig", [s for s in SIGNATURES.signatures if s.fields], ids=lambda s: s.id)
def test_samples_yield_fields(sig):
    """Each signature with fields pulls at least one typed field out of its first sample."""
    for rec in records([(1, sig.samples[0])]):
        got = SIGNATURES.extract(sig, rec.message)
        if got is not None:
            assert got[0], f"{sig.id} matched but extracted nothing"
            return
    pytest.fail(f"{sig.id} did not match")


def test_every_failure_kind_has_a_signature():
    """The failure kinds the rules rely on are all produced by some signature."""
    kinds = {s.failure for s in SIGNATURES.signatures if s.failure}
    assert {"cuda_oom", "kv_too_small", "no_cache_blocks", "free_memory_low", "nccl_error", "model_not_found",
            "hub_auth", "unsupported_gpu", "illegal_memory_access", "host_oom", "engine_died", "exception"} <= kinds


def test_the_signatures_use_the_whole_vocabulary_and_nothing_else():
    """Every event and failure kind of triage/vocabulary.py is some signature's, and the code's own
    groupings of kinds name only words of the vocabulary (a kind no signature gives is dead code)."""
    from triage.facts import combine
    from triage.facts import log_events as facts
    from triage.logs import parse as logparse
    from triage.vocabulary import EVENT_KINDS, FAILURE_KINDS, GENERIC_FAILURES, MEMORY_FAILURES, REQUEST_FAILURES
    assert {s.kind for s in SIGNATURES.signatures} == EVENT_KINDS
    assert {s.failure for s in SIGNATURES.signatures if s.failure} == FAILURE_KINDS
    assert MEMORY_FAILURES | GENERIC_FAILURES | REQUEST_FAILURES <= FAILURE_KINDS
    used = set(facts._SERVING_KINDS) | combine._SETTINGS_KINDS | logparse._BANNER_KINDS | logparse._TRACEBACK_KINDS
    assert used <= EVENT_KINDS


def _bundled_copy(tmp_path, name: str, old: str, new: str):
    folder = tmp_path / "signatures"
    folder.mkdir()
    for path in (RULES_DIR / "signatures").glob("*.toml"):
        text = path.read_text(encoding="utf-8")
        if path.name == name:
            assert old in text
            text = text.replace(old, new, 1)
        (folder / path.name).write_text(text, encoding="utf-8")
    return folder


def test_a_misspelt_failure_kind_names_file_key_and_the_right_one(tmp_path):
    folder = _bundled_copy(tmp_path, "memory_errors.toml", 'failure = "cuda_oom"', 'failure = "cuda_omm"')
    with pytest.raises(RuleError) as err:
        load_signatures(folder)
    message = str(err.value)
    assert "memory_errors.toml" in message and ".failure" in message and "'cuda_omm'" in message, message
    assert "did you mean 'cuda_oom'" in message, message


def test_an_unknown_event_kind_names_file_key_and_the_right_one(tmp_path):
    folder = _bundled_copy(tmp_path, "memory_errors.toml", 'kind = "cuda_oom"', 'kind = "cuda_omm"')
    with pytest.raises(RuleError) as err:
        load_signatures(folder)
    message = str(err.value)
    assert "memory_errors.toml" in message and ".kind" in message and "did you mean 'cuda_oom'" in message, message
    (tmp_path / "other").mkdir()
    folder = _write(tmp_path / "other", """
[[signature]]
id = "made_up"
kind = "zebra_crossing"
anchor = "took"
regex = 'took'
source = "a test's own"
bands = { v1 = "took" }
samples = ["took"]
""")
    with pytest.raises(RuleError) as err:
        load_signatures(folder)
    assert "signature made_up.kind" in str(err.value) and "EVENT_KINDS" in str(err.value)


def _write(tmp_path, body: str):
    folder = tmp_path / "signatures"
    folder.mkdir()
    (folder / "bad.toml").write_text(body, encoding="utf-8")
    return folder


BROKEN_REGEX = """
[[signature]]
id = "broken"
kind = "weights_loaded"
anchor = "took"
regex = '''took (?P<n>[\\d.+ GB'''
source = "a test's own"
bands = { v1 = "took 1 GB" }
samples = ["took 1 GB"]
"""


def test_bad_regex_names_file_key_and_position(tmp_path):
    folder = _write(tmp_path, BROKEN_REGEX)
    with pytest.raises(RuleError) as err:
        load_signatures(folder)
    message = str(err.value)
    assert "bad.toml" in message and "signature broken.regex" in message and "position" in message


def test_the_bundled_signatures_compile_when_first_searched_with_the_same_checks(tmp_path):
    """The bundled regexes are compiled on first use (a short log meets few of them): every one compiles with a
    group per field, and a bad one met late still names file and key, as a user's own does at load time."""
    bundled = load_signatures()
    assert [s.id for s in bundled.signatures if not bundled.pattern(s).groupindex.keys() >= set(s.fields)] == []
    folder = _write(tmp_path, BROKEN_REGEX)
    late = load_signatures(folder, compile_now=False)
    with pytest.raises(RuleError) as err:
        late.match("it took 1 GB")
    assert "bad.toml" in str(err.value) and "signature broken.regex" in str(err.value)


def test_unknown_key_suggests_the_right_one(tmp_path):
    folder = _write(tmp_path, """
[[signature]]
id = "typo"
kind = "weights_loaded"
anchor = "took"
regex = 'took'
source = "a test's own"
bands = { v1 = "took" }
sampels = ["took"]
samples = ["took"]
""")
    with pytest.raises(RuleError) as err:
        load_signatures(folder)
    assert "signature typo.sampels" in str(err.value) and "samples" in str(err.value)


def test_sample_without_anchor_is_rejected(tmp_path):
    folder = _write(tmp_path, """
[[signature]]
id = "noanchor"
kind = "weights_loaded"
anchor = "Model loading took"
regex = 'loading'
source = "a test's own"
bands = { v1 = "weights loading done" }
samples = ["weights loading done"]
""")
    with pytest.raises(RuleError) as err:
        load_signatures(folder)
    assert "anchor" in str(err.value)


def test_field_without_group_is_rejected(tmp_path):
    folder = _write(tmp_path, """
[[signature]]
id = "nogroup"
kind = "weights_loaded"
anchor = "took"
regex = 'took (\\d+)'
source = "a test's own"
bands = { v1 = "took 3" }
fields = { seconds = "int" }
samples = ["took 3"]
""")
    with pytest.raises(RuleError) as err:
        load_signatures(folder)
    assert "fields.seconds" in str(err.value) and "(?P<seconds>" in str(err.value)


def test_pathological_regex_cannot_hang(tmp_path):
    """A user-edited regex with catastrophic backtracking times out instead of hanging the tool."""
    import time
    folder = _write(tmp_path, """
[[signature]]
id = "slow"
kind = "weights_loaded"
anchor = "x"
regex = '(x|xx)+y'           # exponential: the regex module cannot shortcut it
source = "a test's own"
bands = { v1 = "xxy" }
samples = ["xxy"]
""")
    sigs = load_signatures(folder)
    start = time.monotonic()
    assert sigs.match("x" * 40) == []
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("lines,key,message", [
    ('bands = { v1 = "took 1 GB" }', "signature nosource.source", "missing required key"),
    ('source = "vllm/x.py: f"', "signature nosource.bands", "missing required key"),
    ('source = "vllm/x.py: f"\nbands = { v2 = "took 1 GB" }', "signature nosource.bands.v2", "unknown release band"),
    ('source = "vllm/x.py: f"\nbands = { v1 = "it weighed 1 GB" }', "signature nosource.bands.v1", "the anchor"),
])
def test_a_signature_names_its_source_and_a_line_per_band(tmp_path, lines, key, message):
    folder = _write(tmp_path, f"""
[[signature]]
id = "nosource"
kind = "weights_loaded"
anchor = "took"
regex = 'took'
{lines}
""")
    with pytest.raises(RuleError) as err:
        load_signatures(folder)
    assert key in str(err.value) and message in str(err.value), str(err.value)



# Patterns that repeat a group which can split one text many ways (exponential on a line they almost match), and
# patterns whose repeats are each ended by a character they cannot take.
BACKTRACKING = ["(x|xx)+y", "(a+)+", r"(\w+\s?)*", r"(?:\d+)*x", r"(?P<name>[a-z]*){2,}", r"(?:ab|a|b)*c"]
LINEAR = [r"(?:\w+ )*weights", r"^(?:[A-Za-z_]\w*\.)*(?P<exception>[A-Z]\w*Error)", r"(a+)?b", r"(ab)+", r"a{2,5}",
          r"[(]x+[)]+", r"\(x+\)+", r"(?:x{3})+", r"literal {brace}+"]


@pytest.mark.parametrize("pattern", BACKTRACKING)
def test_the_load_time_guard_flags_a_repeated_group_that_splits_a_line_many_ways(pattern):
    """`vtriage rules` warns of a user's signature with such a pattern (the per-search timeout still guards it)."""
    assert nested_quantifier(pattern) and repeats_a_varying_group(pattern)


@pytest.mark.parametrize("pattern", LINEAR)
def test_the_load_time_guard_passes_repeats_a_fixed_character_ends(pattern):
    assert not nested_quantifier(pattern) and not repeats_a_varying_group(pattern)


@pytest.mark.parametrize("sig", SIGNATURES.signatures, ids=lambda s: s.id)
def test_no_bundled_pattern_can_take_exponential_time(sig):
    """Every bundled regex, judged by the parser-based heuristic below and by the guard `vtriage rules` uses."""
    assert not nested_quantifier(sig.regex), f"{sig.origin}: {sig.id} repeats a group that repeats itself"
    assert not repeats_a_varying_group(sig.regex), f"{sig.origin}: {sig.id} would be warned of by `vtriage rules`"


def nested_quantifier(pattern: str) -> bool:
    """Does `pattern` repeat a group that can split a string in many ways, like `(a+)+`, `(\\w+\\s?)*`
    or `(x|xx)+`? Such a pattern can take exponential time on a line it almost matches. A heuristic
    over Python's regex parser: a repeated group whose every fixed character could also be taken by a
    part of it that varies in length, or whose alternatives can start with the same character.
    Patterns the stdlib parser cannot read (`regex`-only syntax) are not judged."""
    try:
        tree = sp.parse(pattern)
    except re.error:           # `regex`-only syntax: not judged
        return False
    repeat_ops = {sc.MAX_REPEAT, sc.MIN_REPEAT, getattr(sc, "POSSESSIVE_REPEAT", sc.MAX_REPEAT)}

    categories: dict[Any, Callable[[str], bool]] = {
        sc.CATEGORY_DIGIT: str.isdigit, sc.CATEGORY_SPACE: str.isspace,
        sc.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    }

    def negated(test: Callable[[str], bool]) -> Callable[[str], bool]:
        return lambda ch: not test(ch)

    for positive, negative in ((sc.CATEGORY_DIGIT, sc.CATEGORY_NOT_DIGIT), (sc.CATEGORY_SPACE, sc.CATEGORY_NOT_SPACE),
                               (sc.CATEGORY_WORD, sc.CATEGORY_NOT_WORD)):
        categories[negative] = negated(categories[positive])

    def takes(op: Any, av: Any, ch: str) -> bool:
        """Can this one-character item take `ch`? (unknown items: assume it can)"""
        if op is sc.LITERAL:
            return ord(ch) == av
        if op is sc.NOT_LITERAL:
            return ord(ch) != av
        if op is sc.ANY:
            return ch != "\n"
        if op is sc.CATEGORY:
            return categories.get(av, lambda c: True)(ch)
        if op is sc.IN:
            negate = any(o is sc.NEGATE for o, _ in av)
            hit = any(ord(ch) == v if o is sc.LITERAL else v[0] <= ord(ch) <= v[1] if o is sc.RANGE
                      else categories.get(v, lambda c: True)(ch) if o is sc.CATEGORY else False
                      for o, v in av if o is not sc.NEGATE)
            return hit != negate
        return True

    def first(items: Any) -> Any:
        item = items[0]
        while item[0] is sc.SUBPATTERN and item[1][-1]:
            item = item[1][-1][0]
        return item

    def inner_repeats(items) -> list:
        """The parts of a group that match a varying number of characters: x+, x*, x?, (|x)."""
        out = []
        for op, av in items:
            if op in repeat_ops and av[0] < av[1]:
                out.append(av[2])
            elif op is sc.BRANCH and any(not b for b in av[1]):
                out.extend(b for b in av[1] if b)
            elif op is sc.SUBPATTERN:
                out.extend(inner_repeats(av[-1]))
        return out

    def ambiguous(body) -> bool:
        while len(body) == 1 and body[0][0] is sc.SUBPATTERN:
            body = list(body[0][1][-1])
        branches = body[0][1][1] if len(body) == 1 and body[0][0] is sc.BRANCH else [body]
        starts = [first(b) for b in branches if b]
        if any(op is sc.LITERAL and any(takes(o, v, chr(av)) for o, v in starts[:i] + starts[i + 1:])
               for i, (op, av) in enumerate(starts)):
            return True           # (x|xy)+: two branches can take the same first character
        for branch in branches:
            inner = inner_repeats(branch)
            if not inner:
                continue
            separators = [chr(av) for op, av in branch if op is sc.LITERAL]
            if not any(all(not takes(first(b)[0], first(b)[1], ch) for b in inner) for ch in separators):
                return True
        return False

    def walk(items) -> bool:
        for op, av in items:
            if op in repeat_ops:
                _, hi, body = av
                if (hi == sc.MAXREPEAT or hi > 16) and ambiguous(list(body)):
                    return True
                if walk(body):
                    return True
            elif op is sc.SUBPATTERN and walk(av[-1]):
                return True
            elif op is sc.BRANCH and any(walk(b) for b in av[1]):
                return True
            elif op in (sc.ASSERT, sc.ASSERT_NOT) and walk(av[1]):
                return True
        return False
    return walk(tree)

