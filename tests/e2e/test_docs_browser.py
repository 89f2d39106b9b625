"""The interactive API docs as a person sees them: headless Chromium (Debian's `chromium` +
`chromium-driver`, driven by Selenium) with every host but 127.0.0.1 unresolvable, so any
asset fetched from a CDN would fail to load and the page would not render."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from ragstream.core.settings import Settings
from ragstream.http import Serving, serving
from tests.harness.browser import headless_chromium

# where the screenshot goes: a temp dir, or the README's images with SCREENSHOT_DIR=docs/img
SCREENSHOT_DIR = "SCREENSHOT_DIR"


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with headless_chromium() as driver:
        yield driver


@pytest.mark.slow
def test_api_docs_render_offline(browser: webdriver.Chrome, tmp_path: Path) -> None:
    with serving(Serving(Settings(data_dir=tmp_path)), "127.0.0.1", 0) as url:
        browser.get(f"{url}/docs")
        WebDriverWait(browser, 60).until(
            ready.presence_of_element_located((By.CSS_SELECTOR, ".opblock"))
        )
        operations = browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
        paths = {op.get_attribute("data-path") or op.text for op in operations}
        assert {"/v1/query", "/v1/retrieve", "/v1/ready", "/v1/status"} <= paths
        assert "ragstream" in browser.find_element(By.CSS_SELECTOR, ".title").text
        loaded = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        assert loaded and all(name.startswith(url) for name in loaded), loaded
        shots = Path(os.environ.get(SCREENSHOT_DIR) or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(shots / "api-docs.png"))
        browser.get(f"{url}/redoc")
        WebDriverWait(browser, 60).until(ready.presence_of_element_located((By.CSS_SELECTOR, "h1")))
        assert "ragstream" in browser.find_element(By.CSS_SELECTOR, "h1").text
