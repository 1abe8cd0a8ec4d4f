"""Every log signature matches its own sample lines, and no other signature claims them."""
from __future__ import annotations

import pytest

from triage.errors import RuleError
from triage.logs.envelope import records
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
        got = sig.extract(rec.message)
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
    assert [s.id for s in bundled.signatures if not s.pattern.groupindex.keys() >= set(s.fields)] == []
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

