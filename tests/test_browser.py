"""Each report opened in a real headless Chromium, as the next engineer on the ticket opens it.

Checked: no console error, no network request at all (the page's own file:// load aside), the verdict
and the fix on screen, the charts drawn, a phone-width page without sideways scrolling, dark mode,
print, scripts off, and `<script>` from a log line never running. Full-page screenshots are written for
a person to look at: $VTRIAGE_ARTIFACTS, or out/report-screenshots/ (the path is in the test summary).

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them). Without them these tests
skip, unless VTRIAGE_REQUIRE_SERVICES=1 (CI), where they fail.
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from triage.vocabulary import KV_SATURATED

from conftest import ROOT, note_artifacts, run_cli

REPORTS = ROOT / "tests" / "reports"
CASES = sorted(p.stem for p in (REPORTS / "inputs").glob("*.log"))
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--window-size=1200,900")


def _missing_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "chromium is not installed (apt-get install chromium chromium-driver)"
    if not shutil.which("chromedriver"):
        return "chromedriver is not installed (apt-get install chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser():
    missing = _missing_browser()
    if missing:
        if os.environ.get("VTRIAGE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"VTRIAGE_REQUIRE_SERVICES=1 but {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    profile = tempfile.mkdtemp(prefix="vtriage-chromium-")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    options.add_experimental_option("perfLoggingPrefs", {"enableNetwork": True, "enablePage": False})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def artifacts() -> Path:
    directory = Path(os.environ.get("VTRIAGE_ARTIFACTS") or ROOT / "out" / "report-screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    note_artifacts(f"report screenshots (browser tests): {directory}")
    return directory


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """Every representative input and both injection logs, rendered by the CLI as a user would."""
    out = tmp_path_factory.mktemp("reports")
    made = {}
    for name, log in [*((c, REPORTS / "inputs" / f"{c}.log") for c in CASES),
                      *((p.stem, p) for p in sorted(REPORTS.glob("injected-*.log")))]:
        page = out / f"{name}.html"
        result = run_cli("--format", "html", "-o", str(page), log.name, cwd=log.parent)
        assert result.stderr == b"" and page.exists(), result.stderr
        data = json.loads(run_cli("--format", "json", log.name, cwd=log.parent).stdout)
        made[name] = (page, data)
    # Absolute paths under a deep folder, as on a CI machine: they must not widen the page (axis labels).
    metrics = out / "a-checkout-folder-with-a-long-name" / "fixtures" / "metrics"
    metrics.mkdir(parents=True)
    for name in ("v1-preempting-0.prom", "v1-preempting-1.prom"):
        shutil.copyfile(ROOT / "fixtures" / "metrics" / name, metrics / name)
    args = ("--metrics", str(metrics / "v1-preempting-0.prom"), "--metrics", str(metrics / "v1-preempting-1.prom"))
    page = out / "metrics-only.html"
    run_cli("--format", "html", "-o", str(page), *args)
    made["metrics-only"] = (page, json.loads(run_cli("--format", "json", *args).stdout))
    return made


def open_page(driver, page: Path) -> dict:
    """Load the page and return what the browser saw: console errors and every network request."""
    driver.get_log("browser")
    driver.get_log("performance")
    driver.get(page.as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    requests = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            requests.append(message["params"].get("request", {}).get("url") or message["params"].get("url"))
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return {"requests": requests, "errors": errors, "resources": resources}


def screenshot(driver, path: Path) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.execute_script("return document.documentElement.clientWidth")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def visible_text(driver, selector: str) -> str:
    from selenium.webdriver.common.by import By
    element = driver.find_element(By.CSS_SELECTOR, selector)
    assert element.is_displayed(), f"{selector} is not visible"
    return element.text


@pytest.mark.parametrize("case", [*CASES, "metrics-only"])
def test_report_opens_cleanly_offline(browser, pages, artifacts, case):
    from selenium.webdriver.common.by import By
    page, data = pages[case]
    seen = open_page(browser, page)
    assert seen["errors"] == []
    assert seen["requests"] == [page.as_uri()], "the page made a network request"
    assert seen["resources"] == []
    assert visible_text(browser, ".verdict-badge") == data["verdict"]
    assert visible_text(browser, "h1")
    if data["command"]:
        assert visible_text(browser, "#command") == data["command"]
    else:
        assert visible_text(browser, ".fixes, #fix p")
    # the pictures: the memory bars whenever a figure is known, the three timeline charts with stats
    if data["timeline"]:
        assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline .plot svg path.series")) >= 2
    if any(k in data["facts"] for k in ("weights_gib", "gpu_total_gib", "this_process_gib")):
        bars = browser.find_elements(By.CSS_SELECTOR, "#memory svg.bar rect.seg")
        assert bars and all(b.size["width"] > 0 for b in bars if b.is_displayed())
    if data["failure_at"] and data["timeline"]:
        assert browser.find_elements(By.CSS_SELECTOR, "#timeline line.failure-line")
    screenshot(browser, artifacts / f"{case}.png")


def test_copy_button_works_and_the_command_is_plain_text(browser, pages):
    from selenium.webdriver.common.by import By
    page, data = pages["kv_cache_too_small"]
    open_page(browser, page)
    button = browser.find_element(By.ID, "copy")
    assert button.is_displayed()
    button.click()
    from selenium.webdriver.support.ui import WebDriverWait  # the clipboard answers asynchronously
    WebDriverWait(browser, 10).until(lambda _: button.text in ("Copied", "Press Ctrl+C"))
    assert open_page(browser, page)["errors"] == []
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        open_page(browser, page)
        assert not browser.find_element(By.ID, "copy").is_displayed()      # no dead button without scripts
        assert visible_text(browser, "#command") == data["command"]
        assert browser.execute_script("return getComputedStyle(document.querySelector('#command')).userSelect") \
            in ("all", "auto", "text")
    finally:
        browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})


@pytest.mark.parametrize("name", ["injected-exception", "injected-command"])
def test_script_in_a_log_line_does_not_run(browser, pages, artifacts, name):
    from selenium.webdriver.common.by import By
    page, _ = pages[name]
    seen = open_page(browser, page)
    assert browser.execute_script("return window.__pwned") is None
    assert seen["errors"] == [], "a blocked script or image would show up here"
    assert seen["requests"] == [page.as_uri()]
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "<script>window.__pwned=" in body                 # shown, literally
    assert not browser.find_elements(By.CSS_SELECTOR, "img, iframe, body script:not(:last-of-type)")
    screenshot(browser, artifacts / f"{name}.png")


def test_phone_width_dark_mode_and_print(browser, pages, artifacts):
    page, _ = pages["preemption_slowdown"]
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        for name, (other, _) in sorted(pages.items()):
            open_page(browser, other)
            assert browser.execute_script("return document.documentElement.scrollWidth <= 390"), \
                f"{name}: the page scrolls sideways on a phone"
        open_page(browser, page)
        background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        red, green, blue = (int(v) for v in background[background.index("(") + 1:-1].split(",")[:3])
        assert red + green + blue < 150, f"dark mode background is {background}"
        screenshot(browser, artifacts / "preemption_slowdown-phone-dark.png")
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print", "features": []})
        assert browser.execute_script("return getComputedStyle(document.querySelector('#copy')).display") == "none"
        assert browser.execute_script("return getComputedStyle(document.body).backgroundColor") \
            in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)")
        pdf = browser.execute_cdp_cmd("Page.printToPDF", {"printBackground": False})
        assert base64.b64decode(pdf["data"])[:5] == b"%PDF-"
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "", "features": []})


# --- the decision, at desktop and phone widths ------------------------------------------------------

INCIDENT = ROOT / "fixtures" / "incidents" / "v1-0.10.1-silent-preemption"
DECISION_INPUTS = {
    **{case: (str(REPORTS / "inputs" / f"{case}.log"),) for case in CASES},
    "weights-estimated": (str(ROOT / "fixtures" / "logs" / "v0-late"
                              / "weights_dont_fit-mixtral-8x7b-one-a100-restart-x3.log"),),
    "silent-preemption": (str(INCIDENT / "server.log"), *(a for i in (1, 2, 3) for a in
                                                          ("--metrics", str(INCIDENT / f"metrics-{i}.prom"))),
                          "--interval", "30"),
    "tensor-parallel-ranks": (str(ROOT / "fixtures" / "logs" / "v1"
                                  / "weights_dont_fit-qwen25-72b-tp2-l40s-both-ranks-oom.log"),),
}
SCREENS = {"desktop": (1200, 900, False), "phone": (390, 844, True)}


@pytest.fixture(scope="module")
def decision_pages(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    out = tmp_path_factory.mktemp("decision")
    made = {}
    for name, args in DECISION_INPUTS.items():
        page = out / f"{name}.html"                          # -o's extension picks HTML
        result = run_cli("-o", str(page), *args)
        assert result.stderr == b"" and page.exists(), result.stderr
        made[name] = (page, json.loads(run_cli("--format", "json", *args).stdout))
    return made


@pytest.fixture
def screen(browser, request):
    width, height, mobile = SCREENS[request.param]
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
    try:
        yield request.param, width, height
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def _rect(browser, element) -> dict:
    return browser.execute_script("const r = arguments[0].getBoundingClientRect(); "
                                  "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, "
                                  "width: r.width};",
                                  element)


@pytest.mark.parametrize("screen", list(SCREENS), indirect=True)
@pytest.mark.parametrize("name", list(DECISION_INPUTS))
def test_the_first_screen_leads_with_the_decision_and_draws_it(browser, decision_pages, artifacts, screen, name):
    from selenium.webdriver.common.by import By
    label, width, height = screen
    page, data = decision_pages[name]
    seen = open_page(browser, page)
    assert seen["errors"] == [] and seen["requests"] == [page.as_uri()]
    head = data["headline"]
    lead = browser.find_element(By.CSS_SELECTOR, "dl.lead")
    shown = lead.text
    for key, word in (("decided_by", "DECIDED BY"), ("restarts", "RESTARTS"), ("impact", "IMPACT")):
        if head[key]:
            assert word in shown.upper() and head[key] in shown, (key, shown)
    assert _rect(browser, lead)["bottom"] <= height, "the decision is not on the first screen"
    charts = browser.find_elements(By.CSS_SELECTOR, "#decision figure.dchart")
    assert len(charts) == len(head["comparisons"])
    for chart, comparison in zip(charts, head["comparisons"]):
        tracks = [_rect(browser, t) for t in chart.find_elements(By.CSS_SELECTOR, ".dtrack")]
        bars = [_rect(browser, b)["width"] for b in chart.find_elements(By.CSS_SELECTOR, ".dbar")]
        assert len({(round(t["left"]), round(t["width"])) for t in tracks}) == 1, "bars on one chart share one scale"
        values = [f["value"] for f in comparison["figures"]]
        ticks = [t.text for t in chart.find_elements(By.CSS_SELECTOR, ".dtick") if t.is_displayed()]
        assert ticks[0] == "0" and ticks[-1].endswith(values and comparison["figures"][0]["unit"]), ticks
        top = tracks[0]["width"]
        axis_end = float(ticks[-1].split()[0].replace(",", "").replace("k", "e3"))
        for value, bar in zip(values, bars):             # each bar is its value on the labelled axis
            assert bar == pytest.approx(top * min(value, axis_end) / axis_end, abs=2.5), (value, bar, top)
        texts = [v.text for v in chart.find_elements(By.CSS_SELECTOR, ".dvalue") if v.text]
        assert all(re.search(r"\d", t) for t in texts) and len(texts) == len(values)
        if comparison["limit"]:
            line = _rect(browser, chart.find_element(By.CSS_SELECTOR, ".dlimit"))
            expected = tracks[0]["left"] + top * comparison["limit"]["value"] / axis_end
            assert line["left"] == pytest.approx(expected, abs=3)
    if label == "phone":
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width, "scrolls sideways"
        clipped = browser.execute_script("""
            const W = arguments[0], out = [];
            for (const cell of document.querySelectorAll('table td, table th')) {
              const r = cell.getBoundingClientRect();
              if (r.width === 0) continue;
              if (r.right > W + 0.5 || cell.scrollWidth > cell.clientWidth + 1)
                out.push(cell.closest('table').className + ': ' + cell.textContent.trim().slice(0, 40));
            }
            return out;""", width)
        assert clipped == [], "table cells cut off on a phone"
    screenshot(browser, artifacts / f"decision-{name}-{label}.png")


@pytest.mark.parametrize("screen", list(SCREENS), indirect=True)
def test_the_timeline_has_axes_units_and_the_saturation_line(browser, decision_pages, screen):
    from selenium.webdriver.common.by import By
    page, data = decision_pages["preemption_slowdown"]
    open_page(browser, page)
    kv = browser.find_element(By.CSS_SELECTOR, "#timeline .chart-kv")
    labels = [t.text for t in kv.find_elements(By.CSS_SELECTOR, ".ytick, .ylimit")]
    assert "0 %" in labels and "100 %" in labels and f"{100 * KV_SATURATED:.0f} %: saturated" in labels
    plot = _rect(browser, kv.find_element(By.CSS_SELECTOR, ".plot svg"))
    line = _rect(browser, kv.find_element(By.CSS_SELECTOR, "line.limit-line"))
    saturated = plot["bottom"] - (plot["bottom"] - plot["top"]) * 0.98 * KV_SATURATED  # the charts keep 2 % at the top
    assert line["top"] == pytest.approx(saturated, abs=3)
    for key in ("requests", "preemptions"):
        chart = browser.find_element(By.CSS_SELECTOR, f"#timeline .chart-{key}")
        ticks = [t.text for t in chart.find_elements(By.CSS_SELECTOR, ".ytick")]
        zero, top = sorted(ticks, key=lambda t: float(t.split()[0].replace(",", "")))
        # "0 requests", "131 requests"
        assert zero.startswith("0 ") and zero.split()[-1] == top.split()[-1] == key, ticks
        assert [t for t in chart.find_elements(By.CSS_SELECTOR, ".ticks .tick") if t.is_displayed()], "no time axis"


def test_preemptions_the_log_does_not_count_are_drawn_from_metrics(browser, decision_pages):
    """V1 0.10.1 logs no preemption; three /metrics snapshots show +886: the chart draws them."""
    from selenium.webdriver.common.by import By
    page, data = decision_pages["silent-preemption"]
    open_page(browser, page)
    chart = browser.find_element(By.CSS_SELECTOR, "#timeline .chart-preemptions")
    assert "Preemptions between /metrics snapshots" in chart.text and "+886" in chart.text
    bars = chart.find_element(By.CSS_SELECTOR, "path.bars")
    assert bars.get_attribute("d") and _rect(browser, bars)["width"] > 0
    assert not chart.find_elements(By.CSS_SELECTOR, ".chart-missing")
    assert sum(p["preemptions"] or 0 for p in data["metrics_timeline"]) == 886


def test_the_memory_picture_draws_the_estimated_weights_the_fix_uses(browser, decision_pages):
    from selenium.webdriver.common.by import By
    page, data = decision_pages["weights-estimated"]
    open_page(browser, page)
    estimate = next(f for f in data["headline"]["comparisons"][0]["figures"] if "estimate" in f["label"])
    segment = browser.find_element(By.CSS_SELECTOR, "#memory rect.seg-weights_gib.seg-estimate")
    assert _rect(browser, segment)["width"] > 0
    legend = browser.find_element(By.CSS_SELECTOR, "#memory table.legend").text
    assert f"Weights (estimate) {estimate['value']:,.2f} GiB" in legend
    assert "Weights unknown" not in legend and "46.7" in legend


@pytest.mark.parametrize("screen", list(SCREENS), indirect=True)
def test_every_memory_bar_has_a_gib_axis_from_0_that_its_parts_are_drawn_to(browser, decision_pages, screen):
    from selenium.webdriver.common.by import By
    page, data = decision_pages["external_pressure"]
    open_page(browser, page)
    for figure in browser.find_elements(By.CSS_SELECTOR, "#memory figure.membar"):
        ticks = figure.find_elements(By.CSS_SELECTOR, ".mem-axis .dtick")
        shown = [t.text for t in ticks if t.is_displayed()]
        assert shown[0] == "0" and shown[-1].endswith(" GiB"), shown
        bar = _rect(browser, figure.find_element(By.CSS_SELECTOR, "svg.bar"))
        last = _rect(browser, ticks[-1])
        gib_per_px = float(shown[-1].split()[0]) / (last["right"] - bar["left"])   # the last label ends at its tick
        for name in ("weights_gib", "this_process_gib"):
            segments = figure.find_elements(By.CSS_SELECTOR, f"rect.seg-{name}")
            if segments and name in data["facts"]:
                drawn = _rect(browser, segments[0])["width"] * gib_per_px
                assert drawn == pytest.approx(data["facts"][name]["value"], rel=0.04), name
