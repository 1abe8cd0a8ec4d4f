"""Saved /metrics snapshots: parsed with line numbers, put in order, every metric name mapped to the same
facts, rates and quantiles computed as Prometheus would, engines kept apart, malformed files refused."""
from __future__ import annotations

import json
import math
import os
import tomllib

import pytest

from triage.errors import InputError
from triage.facts.metric_samples import extract_metric_facts
from triage.metrics.parse import Snapshot, canonical_name, order_snapshots, parse_exposition
from triage.metrics.series import counter_increase, histogram_quantile, per_scrape, time_at_or_above
from triage.metrics.units import split_units

from conftest import FIXTURES, json_report, run_cli

METRICS = FIXTURES / "metrics"
MANIFEST = tomllib.loads((METRICS / "manifest.toml").read_text())
INCIDENTS = sorted(p.parent for p in (FIXTURES / "incidents").glob("*/incident.toml"))


def _samples(*names):
    out = []
    for i, name in enumerate(names):
        out.extend(parse_exposition((METRICS / name).read_text(), name, scrape=i))
    return out


# --- the sets of fixtures/metrics/manifest.toml ----------------------------------------------------

@pytest.mark.parametrize("entry", MANIFEST["set"], ids=[s["files"][0] for s in MANIFEST["set"]])
def test_snapshot_set(entry):
    args = [a for f in entry["files"] for a in ("--metrics", str(METRICS / f))]
    if "interval" in entry:
        args += ["--interval", str(entry["interval"])]
    code, data = json_report(*args)
    assert (data["verdict"], data["rule_path"][-1]) == (entry["verdict"], entry["rule"])
    assert code == {"healthy": 0, "inconclusive": 3}.get(entry["verdict"], 1)
    for name, expected in entry["facts"].items():
        got = data["facts"][name]["value"]
        if isinstance(expected, float):
            assert got == pytest.approx(expected, abs=1e-3), name
        else:
            assert got == expected, name
        assert data["facts"][name]["evidence"], f"{name} has no evidence"
    if "fleet" in entry:
        fleet = data["fleet"]
        assert fleet["detail"] == entry["fleet"]["detail"]
        assert {i["name"]: i["verdict"] for i in fleet["instances"]} == entry["fleet"]["instances"]
    else:
        assert data["fleet"] is None


@pytest.mark.parametrize("entry", MANIFEST["malformed"], ids=[m["file"] for m in MANIFEST["malformed"]])
def test_malformed_file_is_one_line_with_its_line_number(entry):
    result = run_cli("--metrics", str(METRICS / entry["file"]))
    err = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b""
    assert entry["error"] in err and "(hint: " in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("folder", INCIDENTS, ids=[p.name for p in INCIDENTS])
def test_incident_log_and_metrics_join_into_one_verdict(folder):
    spec = tomllib.loads((folder / "incident.toml").read_text())
    log = str(folder / spec["log"])
    metrics = [a for m in spec["metrics"] for a in ("--metrics", str(folder / m))]
    timing = ["--interval", str(spec["interval"])]
    assert json_report(log)[1]["verdict"] == spec["log_alone"]
    assert json_report(*metrics, *timing)[1]["verdict"] == spec["metrics_alone"]
    code, joined = json_report(log, *metrics, *timing)
    assert (joined["verdict"], joined["rule_path"][-1]) == (spec["joined"], spec["joined_rule"])
    for name, expected in spec["facts"].items():
        assert joined["facts"][name]["value"] == pytest.approx(expected, abs=1e-3), name
    cited = {e["source"].rsplit("/", 1)[-1] for e in joined["findings"][0]["evidence"]}
    assert spec["log"] in cited and cited & set(spec["metrics"]), f"evidence must cite log and metrics: {cited}"
    assert [i["kind"] for i in joined["inputs"]] == ["log"] + ["metrics"] * len(spec["metrics"])


# --- parsing, names, order -------------------------------------------------------------------------

def test_samples_carry_their_line():
    samples = _samples("v1-preempting-0.prom")
    usage = next(s for s in samples if s.name == "vllm:kv_cache_usage_perc")
    assert usage.source.line == 9 and usage.value == 0.9912


def test_each_sample_gives_back_its_line_as_written_and_a_series_shares_one_head():
    """A sample held as its series' head and value writes its line back as it was, whatever the value's spelling;
    the snapshots of a server share each series' head (the text was most of what a held sample cost)."""
    from triage.metrics.parse import SeriesCache
    lines = ['vllm:num_requests_running{engine="0"} 306.0', 'vllm:num_requests_running{engine="1"} 306',
             'vllm:kv_cache_usage_perc{engine="0"} 0.1', 'vllm:kv_cache_usage_perc{engine="1"} 0.10',
             "vllm:num_requests_waiting -0.0", 'vllm:prompt_tokens_total{engine="0"} 1.7e+09',
             'vllm:num_requests_waiting{engine="1"} 3.0 1764500000000']
    series = SeriesCache()
    first, second = (parse_exposition("\n".join(lines) + "\n", f"m{i}.prom", series=series) for i in range(2))
    assert [(s.path, s.line, s.text) for s in second] == [("m1.prom", n, line) for n, line in enumerate(lines, 1)]
    assert [s.source.text for s in first] == lines
    assert first[0].written is second[0].written and not isinstance(first[0].written, str)
    assert [isinstance(s.written, str) for s in first] == [False, True, False, True, False, True, True]


def test_malformed_file_names_the_line():
    with pytest.raises(InputError) as err:
        parse_exposition((METRICS / "malformed.prom").read_text(), "malformed.prom")
    assert str(err.value).startswith("malformed.prom:4:")


def test_old_and_new_names_give_the_same_facts():
    old = extract_metric_facts(_samples("v0-names-healthy.prom"))
    assert old["kv_cache_usage_max"].value == 0.0821 and old["preemptions_since_start"].value == 0
    assert old["engine"].value == "v0"
    new = extract_metric_facts(_samples("v1-preempting-0.prom"))
    assert new["kv_cache_usage_max"].value == 0.9912 and new["engine"].value == "v1"
    assert new["kv_cache_tokens"].value == 15307 * 16
    assert new["gpu_memory_utilization"].value == 0.9


def test_both_spellings_present_are_not_counted_twice():
    """0.9.2-0.10.2 expose gpu_* and the new names side by side: the new one is read, once."""
    folder = FIXTURES / "incidents" / "v1-0.10.1-silent-preemption"
    text = (folder / "metrics-1.prom").read_text()
    assert "vllm:gpu_cache_usage_perc" in text and "vllm:gpu_prefix_cache_queries_total" in text
    facts = extract_metric_facts(parse_exposition(text, "m.prom"))
    assert facts["kv_cache_usage_max"].evidence[0].text.startswith("vllm:kv_cache_usage_perc")
    assert facts["prefix_cache_hit_rate"].evidence[0].text.startswith("vllm:prefix_cache_hits_total")


def test_underscore_spelling_from_prometheus_is_the_same_metric():
    """prometheus-client escapes the colon when Prometheus negotiates OpenMetrics: vllm_x is vllm:x."""
    assert canonical_name("vllm_num_preemptions_total") == "vllm:num_preemptions_total"
    assert canonical_name("DCGM_FI_DEV_FB_USED") == "DCGM_FI_DEV_FB_USED"
    samples = parse_exposition('vllm_kv_cache_usage_perc{engine="0",model_name="m"} 0.97\n', "m.prom")
    assert extract_metric_facts(samples)["kv_cache_usage_max"].value == 0.97


def test_two_snapshots_give_a_delta():
    facts = extract_metric_facts(_samples("v1-preempting-0.prom", "v1-preempting-1.prom"))
    assert facts["preemptions"].value == 18954 - 18211
    assert facts["waiting_max"].value == 93 and facts["waiting_growth"].value == 93 - 57
    assert "preemption_rate_per_min" not in facts      # no times: a delta, never a made-up rate


def _snapshot(name, clock=None, mtime=False):
    return Snapshot(name, tuple(parse_exposition((METRICS / name).read_text(), name)), 1, clock, mtime)


def test_exposition_timestamps_put_snapshots_in_order():
    newest_first = [_snapshot("federate-v1-0.30-qwen3-32b-pod-vllm-0-2.prom"),
                    _snapshot("federate-v1-0.30-qwen3-32b-pod-vllm-0-1.prom")]
    samples, how = order_snapshots(newest_first)
    assert "timestamps in the expositions" in how
    first = [s for s in samples if s.name == "vllm:num_preemptions_total" and s.scrape == 0]
    assert first[0].value == 1204 and first[0].time == 1764503940.0


def test_modification_times_give_times_only_when_they_rise():
    pair = ("v1-preempting-0.prom", "v1-preempting-1.prom")
    samples, how = order_snapshots([_snapshot(pair[0], 1000.0, True), _snapshot(pair[1], 1030.0, True)])
    assert "modification times" in how and {s.time for s in samples} == {1000.0, 1030.0}
    copied = [_snapshot(pair[0], 1000.0, True), _snapshot(pair[1], 1000.2, True)]   # cp'd, not scraped
    samples, how = order_snapshots(copied)
    assert "unknown" in how and {s.time for s in samples} == {None}
    samples, how = order_snapshots(copied, interval=20.0)
    assert "20 s apart" in how and {s.time for s in samples} == {0.0, 20.0}


def test_files_are_timed_by_their_mtime(tmp_path):
    paths = []
    for i, name in enumerate(("v1-preempting-0.prom", "v1-preempting-1.prom")):
        target = tmp_path / name
        target.write_bytes((METRICS / name).read_bytes())
        os.utime(target, (1_764_500_000 + 60 * i, 1_764_500_000 + 60 * i))
        paths += ["--metrics", str(target)]
    _, data = json_report(*paths)
    assert data["facts"]["metrics_window_seconds"]["value"] == 60.0
    assert data["facts"]["preemption_rate_per_min"]["value"] == pytest.approx(743.0)
    assert "modification times" in data["facts"]["metrics_window_seconds"]["note"]


# --- thinning: many snapshots held for what their gauges cost (metrics/thinning.py) ----------------

# Seconds of latency summed by scrape 0, 1, ...: their differences, added pair by pair, do not give the last minus
# the first to the bit.
LATENCY_SUMS = (0.008234, 49.833939, 80.285465, 98.500577, 98.502725, 98.510372, 98.518609, 193.167526, 193.169168,
                193.171764, 193.602812, 193.610899)


def _server(scrape: int, engines: int = 4) -> str:
    """One exposition of a server with `engines` engines, a scrape later than the one before."""
    lines = []
    for e in range(engines):
        labels = f'engine="{e}",model_name="m"'
        lines += [f"vllm:kv_cache_usage_perc{{{labels}}} {0.5 + 0.1 * (scrape % 5)}",
                  f"vllm:num_requests_running{{{labels}}} {scrape % 7}",
                  f"vllm:num_preemptions_total{{{labels}}} {3 * scrape}",
                  f"vllm:prompt_tokens_total{{{labels}}} {1000 * scrape}"]
        lines += [f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="{bound}"}} {(b + 1) * scrape}'
                  for b, bound in enumerate(("0.1", "1.0", "10.0", "+Inf"))]
        lines += [f"vllm:e2e_request_latency_seconds_count{{{labels}}} {4 * scrape}",
                  f"vllm:e2e_request_latency_seconds_sum{{{labels}}} {LATENCY_SUMS[scrape % 12]}"]
    return "\n".join(lines) + "\n"


def _saved(tmp_path, bodies, apart: float = 15.0):
    """The bodies saved as files whose modification times are `apart` seconds apart, as scrapes saved them."""
    paths = []
    for i, body in enumerate(bodies):
        path = tmp_path / f"m{i}.prom"
        path.write_text(body)
        os.utime(path, (1_764_500_000 + apart * i, 1_764_500_000 + apart * i))
        paths.append(str(path))
    return paths


def test_many_snapshots_hold_their_gauges_and_the_ends_of_their_counters(tmp_path):
    """Twelve snapshots: the ten in the middle keep only their gauges and the preemption counter the timeline
    shows per scrape (a latency sum that is not a whole number is thinned too); each sample kept stands for
    those thinned before it, so the counts read are what they were."""
    from triage.metrics.inputs import read_files
    from triage.redact import Redactor
    paths = _saved(tmp_path, [_server(i) for i in range(12)])
    thinned, whole = read_files(paths, None, Redactor()), read_files(paths, None, None)
    assert len(whole.samples) == 12 * 4 * 10
    middle = {s.name for s in thinned.samples if 0 < s.scrape < 11}
    assert middle == {"vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_preemptions_total"}
    assert len(thinned.samples) == 2 * 4 * 10 + 10 * 4 * 3
    assert sum(s.stands_for for s in thinned.samples) == len(whole.samples)
    assert thinned.inputs == whole.inputs and thinned.inputs[0].vllm_lines == 40
    facts = [extract_metric_facts(read.samples, read.origin.ordering) for read in (thinned, whole)]
    assert facts[0] == facts[1] and facts[0]["vllm_lines"].value == 480
    assert facts[0]["e2e_latency_p50_seconds"].value == whole_quantile(whole.samples)
    latency_sums = [counter_increase([s for s in read.samples if s.name == "vllm:e2e_request_latency_seconds_sum"])
                    for read in (thinned, whole)]
    assert latency_sums[0].value == latency_sums[1].value       # to the bit: a stretch's last point minus its first
    assert latency_sums[0].value == pytest.approx(4 * (LATENCY_SUMS[-1] - LATENCY_SUMS[0]))


def whole_quantile(samples):
    """The p50 of the latency histogram over the window, from every sample: the increase of each bucket."""
    from triage.metrics.series import histogram_window
    observed = histogram_window(samples, "vllm:e2e_request_latency_seconds")
    return round(histogram_quantile(0.5, observed.buckets), 4)


def test_thinning_keeps_every_point_where_it_could_change_a_figure(tmp_path):
    """Nothing is thinned from snapshots whose times are unknown (a copy of the one before is found by comparing
    every sample), from snapshots with timestamps of their own, nor from an input whose name redaction masks;
    values that are not whole numbers, or too large for a float to hold every whole number, are thinned like
    any other (an increase is a stretch's last point minus its first); a line naming prompt tokens is thinned under
    --redact-prompts too, as it holds no prompt."""
    from triage.metrics.inputs import read_files
    from triage.metrics.parse import parse_exposition
    from triage.metrics.thinning import ANY_REDACTION, Thinning
    bodies = [_server(i) for i in range(4)]
    copied = _saved(tmp_path, bodies, apart=0.2)                        # cp'd together: no times
    assert len(read_files(copied, None).samples) == 160
    assert len(read_files(copied, 5.0).samples) < 160                  # --interval gives each its time

    def held(texts, path="m.prom"):
        thinning = Thinning(ANY_REDACTION)
        for text in texts:
            thinning.add(parse_exposition(text, path))
        return sum(map(len, thinning.result()))

    counter = "vllm:request_success_total{{engine=\"0\"}} {}\nvllm:num_requests_running{{engine=\"0\"}} 1\n"
    assert held([counter.format(v) for v in (1, 2, 3, 4)]) == 6
    assert held([counter.format(v) for v in (0.5, 1.5, 2.5, 3.5)]) == 6
    assert held([counter.format(2.0 ** 40 + v) for v in (1, 2, 3, 4)]) == 6
    assert held([counter.format(v) for v in (1, 2, 3, 4)], "token=hf_abcdefghijklmnopqrstuvwxyz0123.prom") == 8
    tokens = counter.replace("request_success_total", "request_prompt_tokens_total")   # no prompt text in it
    assert held([tokens.format(v) for v in (1, 2, 3, 4)]) == 6
    stamped = [counter.replace("} 1\n", "} 1 1764500000000\n").replace("{}\n", "{} 1764500000000\n").format(v)
               for v in (1, 2, 3, 4)]
    assert held(stamped) == 8


_BUSY_USAGE = (0.3, 0.95, 0.5, 1.0, 0.2, 0.91, 0.6)


def _busy_running(scrape: int, engine: int) -> int:
    """Fewer requests run while the cache is full than in the scrapes around (the longest ones hold it)."""
    return 20 + (scrape * 5 + engine) % 11 if _BUSY_USAGE[(scrape + engine) % 7] >= 0.9 else 40 + scrape % 9


def _busy_server(scrape: int) -> str:
    """Two engines whose KV cache fills now and then while requests wait, and a third that shows only its
    preemption counter, a scrape later than the one before."""
    lines = []
    for e in range(2):
        labels = f'engine="{e}",model_name="m"'
        usage = _BUSY_USAGE[(scrape + e) % 7]
        lines += [f"vllm:kv_cache_usage_perc{{{labels}}} {usage}",
                  f"vllm:num_requests_running{{{labels}}} {_busy_running(scrape, e)}",
                  f"vllm:num_requests_waiting{{{labels}}} {(scrape * 3 + e) % 4}",
                  f"vllm:num_preemptions_total{{{labels}}} {scrape * scrape + e}",
                  f"vllm:request_success_total{{{labels},finished_reason=\"stop\"}} {40 * scrape}"]
    lines.append(f'vllm:num_preemptions_total{{engine="2",model_name="m"}} {3 * scrape}')    # no gauge of its own
    return "\n".join(lines) + "\n"


def test_past_the_levels_held_neighbouring_snapshots_merge_keeping_peaks_and_counts(tmp_path, monkeypatch):
    """Past LEVELS_HELD gauge and preemption points held, neighbouring snapshots merge pairwise (but the first; the
    newest is added after), so the points held stop growing however many snapshots come. What the report reads
    whole stays: the peaks, the preemptions and their rate, the window, the snapshots and samples read, the growth
    of the queue; a merged scrape's level is its members' peak, so the mean and the counts of full scrapes can
    only rise; the requests running are those of the fuller cache's scrape."""
    from triage.metrics import thinning
    from triage.metrics.inputs import read_files
    from triage.redact import Redactor
    from triage.report.timeline import _clock, metric_timeline
    paths = _saved(tmp_path, [_busy_server(i) for i in range(30)])
    whole = read_files(paths, None, None)
    monkeypatch.setattr(thinning, "LEVELS_HELD", 24)
    merged = read_files(paths, None, Redactor())
    scrapes = sorted({s.scrape for s in merged.samples})
    assert len(scrapes) < 12 and scrapes[0] == 0 and scrapes[-1] == 29
    assert {s.stands_for for s in merged.samples if s.scrape in (0, 29) and "_total" not in s.name} == {1}
    for engine in ("0", "1"):               # an engine is a unit of the report (report/fleet.py)
        facts = [{name: fact.value for name, fact in extract_metric_facts(
                  [s for s in read.samples if s.labels["engine"] == engine], read.origin.ordering).items()}
                 for read in (merged, whole)]
        for same in ("kv_cache_usage_max", "waiting_max", "waiting_growth", "preemptions",
                     "preemption_rate_per_min", "metrics_snapshots", "metrics_window_seconds", "vllm_lines",
                     "requests_finished", "preemptions_per_request_mean"):
            assert facts[0][same] == facts[1][same], same
        assert facts[0]["metrics_snapshots"] == 30 and facts[0]["vllm_lines"] == 30 * 5
        for rises in ("kv_cache_usage_mean", "saturated_intervals", "saturated_queue_intervals", "saturated_seconds"):
            assert facts[0][rises] >= facts[1][rises], rises
        assert facts[0]["saturated_intervals"] <= 30 and facts[0]["saturated_seconds"] <= 30 * 15
        assert facts[0]["running_max"] <= facts[1]["running_max"]     # what ran when the cache was fuller
        full = {_busy_running(scrape, int(engine)) for scrape in range(30)
                if _BUSY_USAGE[(scrape + int(engine)) % 7] >= 0.9}
        assert facts[0]["running_at_saturation"] in full             # a count seen with a full cache
        points = metric_timeline([s for s in merged.samples if s.labels["engine"] == engine])
        ends = [after - 1 for after in scrapes[1:]] + [29]      # the last snapshot merged into each scrape held
        counts = [end * end + int(engine) for end in ends]        # the preemption counter there
        assert [p.preemptions for p in points] == [None] + [b - a for a, b in zip(counts, counts[1:])]
        assert [p.time for p in points] == [_clock(1_764_500_000 + 15 * scrape) for scrape in scrapes]
    counted = [extract_metric_facts([s for s in read.samples if s.labels["engine"] == "2"], read.origin.ordering)
               for read in (merged, whole)]
    assert [f["metrics_snapshots"].value for f in counted] == [30, 30]     # its counter's points count the scrapes
    assert [f["preemptions"].value for f in counted] == [3 * 29, 3 * 29]

    held = thinning.Thinning(Redactor())
    most = 0
    for i in range(300):
        held.add(parse_exposition(_busy_server(i), f"m{i}.prom"))
        most = max(most, held.levels)
    assert most <= 24 + 9                     # the points held: never more than the cap and one snapshot's
    assert sum(s.stands_for for snapshot in held.result() for s in snapshot
               if s.name == "vllm:num_requests_running") == 300 * 2


def test_a_time_window_keeps_every_sample_of_timed_snapshots(tmp_path):
    """--since/--until cut samples by their time after reading: every sample of every snapshot is there to cut."""
    paths = _saved(tmp_path, [_server(i) for i in range(4)])
    _, data = json_report(*[a for p in paths for a in ("--metrics", p)], "--since", "2025-11-01T00:00:00Z")
    assert data["window"]["samples_total"] == 160 and data["window"]["samples_kept"] == 160


# --- arithmetic ------------------------------------------------------------------------------------

def _exposition(*bodies):
    return [s for i, body in enumerate(bodies) for s in parse_exposition(body, f"s{i}.prom", scrape=i, time=10.0 * i)]


def test_counter_reset_is_a_restart_not_a_negative_delta():
    samples = _exposition('c_total 100\nc_created 1000\n', 'c_total 130\nc_created 1000\n',
                          'c_total 7\nc_created 2000\n')
    grown = counter_increase([s for s in samples if s.name == "c_total"], [s for s in samples if s.name == "c_created"])
    assert grown.value == 30 + 7 and grown.resets == 1
    # a restart that already climbed past the old value is caught by _created alone
    samples = _exposition('c_total 100\nc_created 1000\n', 'c_total 150\nc_created 2000\n')
    grown = counter_increase([s for s in samples if s.name == "c_total"], [s for s in samples if s.name == "c_created"])
    assert grown.value == 150 and grown.resets == 1


def test_histogram_quantile_matches_promql():
    buckets = [(0.1, 10.0), (0.5, 50.0), (1.0, 90.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.5)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.1 + 0.4 * 15 / 40)
    assert histogram_quantile(0.95, buckets) == 1.0          # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None


def test_latency_quantiles_cover_the_window_only():
    """Requests finished before the first snapshot do not count: p95 is of the slow 60 only."""
    facts = extract_metric_facts(_samples("v0-0.4.3-llama3-8b-a10g-preempting-1.prom",
                                          "v0-0.4.3-llama3-8b-a10g-preempting-2.prom"))
    since_start = extract_metric_facts(_samples("v0-0.4.3-llama3-8b-a10g-preempting-2.prom"))
    assert facts["ttft_p50_seconds"].value > 1.5 > since_start["ttft_p50_seconds"].value
    assert "over the window" in facts["ttft_p50_seconds"].note
    assert "since the server started" in since_start["ttft_p50_seconds"].note


def test_time_at_full_kv_cache():
    samples = _exposition(*(f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {u}\n'
                            for u in (0.5, 0.96, 0.99, 0.7)))
    levels = per_scrape(samples, "max")
    assert time_at_or_above(levels, 0.95) == (20.0, 40.0)
    facts = extract_metric_facts(samples)
    assert facts["saturated_seconds"].value == 20.0 and facts["saturated_share"].value == 0.5
    untimed = [s for body in ('vllm:kv_cache_usage_perc 0.99\n',) for s in parse_exposition(body, "x")]
    assert "saturated_seconds" not in extract_metric_facts(untimed)


# --- engines, models, GPUs ---------------------------------------------------------------------------

def test_engines_stay_separate():
    units, warnings = split_units(_samples("v1-0.11.1-llama31-70b-dp2-engine1-preempting.prom"))
    assert [(u.engine, extract_metric_facts(u.samples)["preemptions_since_start"].value) for u in units] == \
        [("0", 3), ("1", 5210)]
    for unit in units:       # cache_config_info has one series per engine; each unit gets its own
        infos = [s for s in unit.samples if s.name == "vllm:cache_config_info"]
        assert [s.labels["engine"] for s in infos] == [unit.engine]
    assert warnings == []


_SERVER_WIDE = (  # 0.32+: admission_rejections has model_name and reason but no engine label
    'vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 12\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.41\n'
    'vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-8B"} 0\n'
    'vllm:admission_rejections_total{model_name="Qwen/Qwen3-8B",reason="queue_full"} 0\n'
    'vllm:admission_rejections_created{model_name="Qwen/Qwen3-8B",reason="queue_full"} 1.7806e+09\n')


def test_series_without_an_engine_label_belong_to_the_server_not_a_new_instance(tmp_path):
    units, warnings = split_units(_exposition(_SERVER_WIDE))
    assert [(u.model, u.engine) for u in units] == [("Qwen/Qwen3-8B", "0")] and warnings == []
    assert any(s.name == "vllm:admission_rejections_total" for s in units[0].samples)
    snapshot = tmp_path / "m.prom"
    snapshot.write_text(_SERVER_WIDE)
    code, data = json_report("--metrics", str(snapshot))
    assert data["fleet"] is None and data["verdict"] == "healthy" and code == 0
    two_engines = _SERVER_WIDE + _SERVER_WIDE.replace('engine="0"', 'engine="1"').split("vllm:admission")[0]
    units, _ = split_units(_exposition(two_engines))
    assert [u.engine for u in units] == ["0", "1"]


YOUNG, OLD = (METRICS / f"federate-v1-0.11.1-qwen3-8b-one-snapshot-{age}.prom" for age in ("young", "old"))


def test_one_snapshot_old_and_young_servers_with_the_same_lifetime_count():
    """640 preemptions since the start: 53 a minute on a server 12 minutes old, a trickle on one a month old."""
    _, young = json_report("--metrics", str(YOUNG))
    _, old = json_report("--metrics", str(OLD))
    assert young["verdict"] == "preemption_slowdown" and old["verdict"] == "healthy"
    for data in (young, old):
        assert data["facts"]["preemptions_since_start"]["value"] == 640 and "preemptions" not in data["facts"]
        assert "process_start_time_seconds" in data["facts"]["server_uptime_seconds"]["note"]
    assert "53.3 per minute on average" in young["summary"]
    slowdown = next(r for r in old["ruled_out"] if r["verdict"] == "preemption_slowdown")
    assert slowdown["reason"].startswith("640 preemption(s) since the server started, 0.01 a minute on average")


def test_the_same_snapshot_given_three_times_is_read_once():
    for path, verdict in ((YOUNG, "preemption_slowdown"), (OLD, "healthy"), (METRICS / "v1-preempting-0.prom",
                                                                            "preemption_slowdown")):
        _, once = json_report("--metrics", str(path))
        _, thrice = json_report(*(["--metrics", str(path)] * 3))
        assert once["verdict"] == thrice["verdict"] == verdict, path.name
        assert thrice["facts"]["metrics_snapshots"]["value"] == 1
        assert "2 of the 3 snapshots are copies" in thrice["facts"]["metrics_snapshots"]["note"]


def test_without_a_time_base_or_request_count_a_lifetime_count_is_context(tmp_path):
    untimed = tmp_path / "m.prom"
    untimed.write_text("".join(line.rsplit(" ", 1)[0] + "\n" for line in YOUNG.read_text().splitlines()
                               if "request_success" not in line and not line.startswith("#")))
    code, data = json_report("--metrics", str(untimed))
    assert data["verdict"] == "healthy" and "preemption_rate_per_min" not in data["facts"]
    slowdown = next(r for r in data["ruled_out"] if r["verdict"] == "preemption_slowdown")
    assert "640 preemption(s) since the server started" in slowdown["reason"]
    assert "context, not a verdict" in slowdown["reason"]
    with_requests = tmp_path / "r.prom"                  # the request count alone weighs it: 0.71 per request
    with_requests.write_text("".join(line.rsplit(" ", 1)[0] + "\n" for line in YOUNG.read_text().splitlines()
                                     if not line.startswith("#")))
    _, data = json_report("--metrics", str(with_requests))
    assert (data["verdict"], data["rule_path"][-1]) == ("preemption_slowdown", "preemptions-per-request")
    assert data["facts"]["preemptions_per_request_mean"]["value"] == pytest.approx(640 / 900, abs=1e-3)


def test_gpu_exporter_series_join_the_server_they_describe():
    units, warnings = split_units(_samples("v1-0.11.1-llama31-8b-h100-healthy.prom", "dcgm-h100-external.prom"))
    assert len(units) == 1 and any(s.name == "DCGM_FI_DEV_FB_USED" for s in units[0].samples)
    fleet = _exposition('vllm:num_requests_running{pod="vllm-0",model_name="m"} 1\n'
                        'vllm:num_requests_running{pod="vllm-1",model_name="m"} 1\n'
                        'DCGM_FI_DEV_FB_USED{gpu="0",exported_pod="vllm-1"} 100\n'
                        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="node-9"} 100\n')
    units, warnings = split_units(fleet)
    assert [[s.name for s in u.samples] for u in units] == [["vllm:num_requests_running"],
                                                             ["vllm:num_requests_running", "DCGM_FI_DEV_FB_USED"]]
    assert len(warnings) == 1 and "matched no vLLM instance" in warnings[0]


def test_text_report_of_engines_lists_each():
    result = run_cli("--metrics", str(METRICS / "v1-0.11.1-llama31-70b-dp2-engine1-preempting.prom"))
    out = result.stdout.decode()
    assert result.returncode == 1
    assert "FLEET  2 instances" in out and "engine=0  healthy" in out
    assert "engine=1  preemption_slowdown" in out and "stands out: preempting: 5210 preemptions" in out
    assert "Overall: PREEMPTION SLOWDOWN" in out and "In detail: engine=1" in out


def test_metrics_alone_give_a_verdict():
    result = run_cli("--format", "json", "--metrics", str(METRICS / "v1-preempting-0.prom"),
                     "--metrics", str(METRICS / "v1-preempting-1.prom"))
    data = json.loads(result.stdout)
    assert data["verdict"] == "preemption_slowdown" and result.returncode == 1
    healthy = run_cli("--metrics", str(METRICS / "v0-names-healthy.prom"))
    assert healthy.returncode == 0 and b"HEALTHY" in healthy.stdout


def test_malformed_metrics_on_the_command_line():
    result = run_cli("--metrics", str(METRICS / "malformed.prom"))
    assert result.returncode == 2
    assert b"malformed.prom:4:" in result.stderr and b"Traceback" not in result.stderr


def test_secrets_in_metric_labels_are_redacted(tmp_path):
    """Evidence from metrics is captured text like a log line: a token in a label never reaches the report."""
    snapshot = tmp_path / "m.prom"
    snapshot.write_text('vllm:cache_config_info{block_size="16",gpu_memory_utilization="0.85",'
                        'kv_transfer_config="hf_token=hf_abcdefghijklmnopqrstuvwxyz0123"} 1.0\n'
                        'vllm:num_requests_running{model_name="m"} 2.0\n')
    _, data = json_report("--metrics", str(snapshot))
    assert data["facts"]["gpu_memory_utilization"]["value"] == 0.85
    assert "hf_abcdefghij" not in json.dumps(data) and data["redactions"].get("hf_token", 0) >= 1
    shown = run_cli("--format", "json", "--no-redact", "--metrics", str(snapshot))
    assert b"hf_abcdefghij" in shown.stdout


def test_secrets_among_thousands_of_clean_sample_lines_are_masked_and_counted_line_by_line():
    """Sample lines are tested for secrets a batch at a time: a secret in one line of a batch is masked and
    counted as line-by-line redaction does."""
    from triage.read import masked_samples
    from triage.redact import Redactor
    lines = [f'vllm:num_requests_running{{engine="{i}",model_name="m"}} {i}' for i in range(5000)]
    lines[2500] = 'vllm:cache_config_info{kv_transfer_config="hf_token=hf_abcdefghijklmnopqrstuvwxyz0123"} 1.0'
    lines[4100] = 'vllm:x{api_key="sk-abcdefghijklmnopqrstuvwxyz0123456789"} 1'
    samples = parse_exposition("\n".join(lines) + "\n", "m.prom")
    batched, by_line = Redactor(), Redactor()
    masked = masked_samples(samples, batched)
    for s, m in zip(samples, masked):
        text = by_line.text(s.source.text)
        labels = {k: by_line.text(v) for k, v in s.labels.items()}
        assert (m.source.text, dict(m.labels)) == (text, labels)
    assert "hf_abcdefghij" not in masked[2500].source.text and "sk-abcdefghij" not in masked[4100].source.text
    assert batched.counts["hf_token"] == 2          # once for the line, once for its label's value
    assert batched.counts == by_line.counts
    assert masked[0] is samples[0]                   # a clean sample is the same object: nothing copied


def test_snapshots_holding_more_samples_than_the_ceiling_are_refused(monkeypatch):
    """Every sample of every snapshot is held until the facts are made: past MAX_SAMPLES_HELD the file
    that brings the count over is named, with a hint, before anything is diagnosed."""
    from triage.metrics import inputs, parse
    names = [str(METRICS / "v1-0.11.1-llama31-8b-h100-stalled-1.prom"),
             str(METRICS / "v1-0.11.1-llama31-8b-h100-stalled-2.prom")]
    one = len(inputs.read_files(names[:1], None).samples)
    monkeypatch.setattr(parse, "MAX_SAMPLES_HELD", one + 1)
    with pytest.raises(InputError) as refused:
        inputs.read_files(names, None)
    assert str(refused.value).startswith(names[1]) and "more than the" in str(refused.value)
    assert "give fewer snapshots" in str(refused.value) and "\n" not in str(refused.value)
    assert len(inputs.read_files(names[:1], None).samples) == one


def test_a_snapshot_from_stdin():
    body = (METRICS / "v1-preempting-0.prom").read_bytes()
    result = run_cli("--format", "json", "--metrics", "-", stdin=body)
    data = json.loads(result.stdout)
    assert result.returncode == 1 and data["inputs"][0]["path"] == "<stdin>"
    assert data["facts"]["kv_cache_usage_max"]["evidence"][0]["source"] == "<stdin>"
    assert run_cli("-", "--metrics", "-", stdin=body).returncode == 2
