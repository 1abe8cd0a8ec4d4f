"""Remake the report screenshots in docs/img/ from the test inputs, in a real headless Chromium.

    python docs/screenshots.py        # needs chromium, chromium-driver and the test extra (selenium)

Each shot is one part of a real report (`vtriage --format html` on tests/reports/inputs/*.log), cut to
an element so the PNGs stay small.
"""
from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "tests" / "reports" / "inputs"
OUT = ROOT / "docs" / "img"
# (png, input, first element, last element, width, dark)
SHOTS = (
    ("report-top.png", "external_pressure", "#verdict", "#fix", 1100, False),
    ("report-memory.png", "external_pressure", "#memory", "#memory", 1100, False),
    ("report-timeline.png", "preemption_slowdown", "#timeline", "#timeline", 1100, False),
    ("report-phone-dark.png", "kv_cache_too_small", "#verdict", "#fix", 390, True),
)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    profile = tempfile.mkdtemp(prefix="vtriage-shots-")
    options = Options()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for png, case, first, last, width, dark in SHOTS:
                page = Path(tmp) / f"{case}.html"
                subprocess.run([sys.executable, "-m", "triage", "--format", "html", "-o", str(page), f"{case}.log"],
                               cwd=INPUTS, check=False)
                driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600})
                driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
                    {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})
                driver.get(page.as_uri())
                top = driver.execute_script(f"return document.querySelector('{first}').getBoundingClientRect().top"
                                            " + window.scrollY")
                bottom = driver.execute_script(f"return document.querySelector('{last}').getBoundingClientRect()"
                                               ".bottom + window.scrollY")
                shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
                    "format": "png", "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": max(0, top - 16), "width": width, "height": bottom - top + 32, "scale": 1}})
                (OUT / png).write_bytes(base64.b64decode(shot["data"]))
                print(f"{OUT / png}: {(OUT / png).stat().st_size // 1024} KB")
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
