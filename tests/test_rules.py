"""The decision tree: every rule proves itself on its examples, and broken rule files fail clearly."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from triage.decide.engine import evaluate, fill
from triage.decide.ruleset import load_rules, parse_condition
from triage.errors import RuleError
from triage.logs.signatures import load_signatures
from triage.model import Fact
from triage.ruletests import example_problem
from triage.vocabulary import VERDICTS

from conftest import FIXTURES, RULES_DIR, run_cli

RULES = load_rules(RULES_DIR)
EXAMPLES = [(node, ex) for node in sorted(RULES.nodes.values(), key=lambda n: n.id) for ex in node.examples]


@pytest.mark.parametrize("node,example", EXAMPLES,
                         ids=[f"{n.id}:{e.expect}:{e.fixture or (e.metrics[0] if e.metrics else i)}"
                              for i, (n, e) in enumerate(EXAMPLES)])
def test_rule_example(kit, node, example):
    """Each rule fires on its 'fires' examples and stays quiet on its 'quiet' ones (the check
    `vtriage rules --test` runs)."""
    problem = example_problem(kit, node, example, [FIXTURES])
    assert problem is None, f"{node.id}: {problem}"


@pytest.mark.parametrize("node", sorted(RULES.nodes.values(), key=lambda n: n.id), ids=lambda n: n.id)
def test_every_rule_has_both_examples(node):
    expects = {e.expect for e in node.examples}
    assert expects == {"fires", "quiet"}, f"{node.id} needs a fires and a quiet example"


def test_every_verdict_is_reachable():
    reachable = {n.verdict for n in RULES.nodes.values() if n.verdict}
    assert reachable == set(RULES.classes) == set(VERDICTS)


def test_the_code_tables_keyed_by_verdict_name_only_verdicts():
    """Tables in code that treat some verdicts apart use the words of triage/vocabulary.py, so a
    renamed verdict cannot leave one behind; the decision card has a sentence for every verdict."""
    from triage.alerts import CATCHES
    from triage.render.decision import _DECIDERS
    from triage.render.text import _VERDICT_COLOUR
    from triage.vocabulary import MEMORY_VERDICTS
    assert set(CATCHES) | MEMORY_VERDICTS | set(_VERDICT_COLOUR) <= set(VERDICTS)
    assert set(_DECIDERS) | {"weights_dont_fit"} == set(VERDICTS)    # weights: from the report's estimate


def test_absent_fact_is_unknown_not_false():
    """Three-valued logic: a predicate on a missing fact is unknown, and `any` can still be true."""
    cond = parse_condition(Path("t.toml"), "when", {"any": [
        {"fact": "preemptions", "op": ">=", "value": 10},
        {"fact": "server_up", "op": "==", "value": True}]})
    assert evaluate(cond, {}) is None
    assert evaluate(cond, {"server_up": Fact("server_up", True)}) is True
    only = parse_condition(Path("t.toml"), "when", {"fact": "preemptions", "op": "<", "value": 10})
    assert evaluate(only, {}) is None


# --- broken rule files --------------------------------------------------------------------------

def _rules_copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _expect_error(folder: Path, *needles: str) -> str:
    with pytest.raises(RuleError) as err:
        load_rules(folder)
    message = str(err.value)
    for needle in needles:
        assert needle in message, message
    return message


def test_unknown_fact_names_file_key_and_suggestion(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "kv-too-small.toml"
    path.write_text(path.read_text().replace('fact = "failure_kind"', 'fact = "failure_kynd"', 1))
    _expect_error(folder, "kv-too-small.toml", "when.fact", "failure_kynd", "did you mean 'failure_kind'")


def test_a_misspelt_failure_kind_in_a_condition_names_file_key_and_the_right_one(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "kv-too-small.toml"
    path.write_text(path.read_text().replace('value = "kv_too_small"', 'value = "kv_too_smal"', 1))
    _expect_error(folder, "kv-too-small.toml", "when.value", "'kv_too_smal'", "did you mean 'kv_too_small'")


def test_a_misspelt_word_in_a_list_or_a_class_check_is_found_too(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "classes" / "external_pressure.toml"
    path.write_text(path.read_text().replace('value = ["kv_too_small", "no_cache_blocks"]',
                                             'value = ["kv_too_smal", "no_cache_blocks"]', 1))
    _expect_error(folder, "external_pressure.toml", "ruled_out[1].when.value[0]", "did you mean 'kv_too_small'")


def test_a_misspelt_phase_in_a_condition_is_a_load_error(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "oom-loading-weights.toml"
    text = path.read_text()
    assert 'value = "loading_weights"' in text
    path.write_text(text.replace('value = "loading_weights"', 'value = "loading_weight"', 1))
    _expect_error(folder, "oom-loading-weights.toml", "failed_phase is never 'loading_weight'",
                  "did you mean 'loading_weights'")


def test_unknown_key_is_rejected(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "oom.toml"
    path.write_text('severty = "high"\n' + path.read_text())
    _expect_error(folder, "oom.toml", "severty", "unknown key")


def test_id_must_match_file_name(tmp_path):
    folder = _rules_copy(tmp_path)
    (folder / "oom.toml").rename(folder / "oom-renamed.toml")
    _expect_error(folder, "oom-renamed.toml", "id")


def test_unknown_operator(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "no-cache-blocks.toml"
    path.write_text(path.read_text().replace('op = "=="', 'op = "equals"', 1))
    _expect_error(folder, "no-cache-blocks.toml", "when.op", "equals")


def test_unknown_fix_name(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "kv-too-small.toml"
    path.write_text(path.read_text().replace('"max_model_len_that_fits"', '"max_model_len_that_fit"'))
    _expect_error(folder, "kv-too-small.toml", "fixes[0]", "did you mean 'max_model_len_that_fits'")


def test_unknown_placeholder_in_summary(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "oom.toml"
    path.write_text(path.read_text().replace("{tried_to_allocate_gib:.2f}", "{tried_gib:.2f}"))
    _expect_error(folder, "oom.toml", "summary", "{tried_gib}")


def test_missing_parent_and_cycles(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "oom.toml"
    path.write_text(path.read_text().replace('parent = "failed"', 'parent = "faild"'))
    _expect_error(folder, "oom.toml", "parent", "faild")
    path.write_text(path.read_text().replace('parent = "faild"', 'parent = "oom-loading-weights"'))
    _expect_error(folder, "cycle")


def test_invalid_toml_says_where(tmp_path):
    folder = _rules_copy(tmp_path)
    (folder / "oom.toml").write_text('id = "oom"\ntitle = "x\n')
    _expect_error(folder, "oom.toml", "not valid TOML", "line")


def test_comparison_on_text_fact_is_rejected(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "no-cache-blocks.toml"
    path.write_text(path.read_text().replace('{ fact = "failure_kind", op = "==", value = "no_cache_blocks" }',
                                             '{ fact = "failure_kind", op = ">", value = 3 }'))
    _expect_error(folder, "no-cache-blocks.toml", "when.op", "failure_kind is str")


def test_missing_class_file(tmp_path):
    folder = _rules_copy(tmp_path)
    (folder / "classes" / "healthy.toml").unlink()
    _expect_error(folder, "classes", "healthy")


# --- vtriage rules --test ----------------------------------------------------------------------------

def test_rules_test_passes_on_the_bundled_rules():
    result = run_cli("rules", "--test")
    out = result.stdout.decode()
    assert result.returncode == 0, out
    assert "FAIL" not in out
    examples, samples = len(EXAMPLES), sum(len(s.samples) for s in load_signatures(RULES_DIR / "signatures").signatures)
    assert out.strip().splitlines()[-1] == (f"{examples}/{examples} rule examples and {samples}/{samples} "
                                            "signature samples passed: all passed")


def test_rules_test_names_the_file_and_example_that_fails(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "kv-too-small.toml"
    text = path.read_text()
    quiet = "[[examples]]\nexpect = \"quiet\"\nlog = '''\n(EngineCore"
    assert quiet in text
    path.write_text(text.replace(quiet, quiet.replace('"quiet"', '"fires"'), 1))
    sigs = folder / "signatures" / "memory_errors.toml"
    sigs.write_text(sigs.read_text().replace("samples = [",
                                             'samples = ["torch: out of memory. Tried to allocate (no figure)", ', 1))
    result = run_cli("rules", "--test", "--rules", str(folder))
    out = result.stdout.decode()
    assert result.returncode == 1, out
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert fails == [f"FAIL {path}: examples[1] (inline log): expected to fire, but it stayed quiet "
                     "(verdict healthy via no-failure > healthy-started)",
                     f"FAIL {sigs}: signature cuda_oom.samples[0]: does not match its own signature"], out
    assert out.splitlines()[-1].endswith("signature samples passed: 2 failed"), out


def test_rules_test_of_rules_that_do_not_load_is_a_usage_error(tmp_path):
    folder = _rules_copy(tmp_path)
    path = folder / "kv-too-small.toml"
    path.write_text(path.read_text().replace('value = "kv_too_small"', 'value = "kv_too_smal"', 1))
    result = run_cli("rules", "--test", "--rules", str(folder))
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "kv-too-small.toml: when.value" in err and "did you mean 'kv_too_small'" in err


def test_a_figure_holding_braces_is_written_as_it_is():
    """A fact's value is text from the log: braces in it are not placeholders, in an optional segment or not."""
    line = Fact("line", "processing method start_worker_execution_loop.{", None, ())
    named = Fact("engine", "{engine}", None, ())
    facts = {"line": line, "engine": named}
    assert fill("not in the input ({line}).[[ Last: {line}.]] {engine}", facts) == (
        "not in the input (processing method start_worker_execution_loop.{). Last: processing method "
        "start_worker_execution_loop.{. {engine}")
    assert fill("a[[ {absent}]] b {{literal}}", facts) == "a b {literal}"
