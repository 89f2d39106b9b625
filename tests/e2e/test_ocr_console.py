"""The console on a scan, as a person sees it (headless Chromium, network cut): a citation of
text read by OCR opens its source with an "OCR" badge that gives the engine's confidence and
where on the page the lines are; the scan's file page shows its page count, how many pages
OCR read, and the badge on each OCR'd chunk.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from ragstream import api
from ragstream.core.settings import Settings
from ragstream.http import Serving, serving
from ragstream.query.engine import QueryEngine
from ragstream.service.served import ServedIndex
from tests.e2e.test_docs_browser import browser  # noqa: F401 (the fixture)
from tests.harness.scans import REPORT, render_page, save_png

pytestmark = pytest.mark.slow  # a real sync, a server and a browser


def test_ocr_citation_shows_its_badge(browser: webdriver.Chrome, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "scans"
    root.mkdir()
    save_png(render_page(REPORT, dpi=150), root / "report.png")
    settings = Settings(data_dir=tmp_path / "data").with_paths([root])
    assert api.sync([root], settings=settings).dead_letters == []
    wait = WebDriverWait(browser, 120)
    with (
        QueryEngine.open(settings) as engine,
        serving(Serving(settings, ServedIndex(engine)), "127.0.0.1", 0) as url,
    ):
        browser.get(f"{url}/")
        wait.until(ready.presence_of_element_located((By.ID, "question")))
        browser.find_element(By.ID, "question").send_keys("When is the next inspection due?")
        browser.find_element(By.CSS_SELECTOR, "#ask-form button").click()
        wait.until(lambda b: b.find_element(By.ID, "answer").get_attribute("data-state") == "done")
        assert "September" in browser.find_element(By.ID, "answer").text
        browser.find_element(By.CSS_SELECTOR, "#answer button.cite").click()
        badge = browser.find_element(By.CSS_SELECTOR, "#source .badge.ocr")
        assert badge.text == "OCR"
        title = badge.get_attribute("title") or ""
        assert title.startswith("read by OCR from a page image (confidence 0.9"), title
        assert "down the page" in title
        assert "page 1" in browser.find_element(By.ID, "source").text

        browser.get(f"{url}/#file/scans%3Areport.png")
        wait.until(lambda b: "page" in b.find_element(By.ID, "file-meta").text)
        assert "1 page (1 read by OCR)" in browser.find_element(By.ID, "file-meta").text
        assert browser.find_elements(By.CSS_SELECTOR, "#file-chunks .badge.ocr")
