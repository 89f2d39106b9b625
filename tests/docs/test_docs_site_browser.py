"""The built documentation site in headless Chromium (Debian's `chromium` + `chromium-driver`,
driven by Selenium), served from 127.0.0.1 with every other host unresolvable: every page of
the nav loads and renders, the browser's network log shows no request off the machine, and the
offline search finds "blue/green"."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait
from test_docs_site import html_of, nav_pages

from tests.harness.browser import headless_chromium

pytestmark = pytest.mark.slow
LOCAL_SCHEMES = ("data:", "blob:", "about:", "chrome:", "chrome-extension:")


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No access log on the test's stderr."""


@pytest.fixture(scope="module")
def site_url(built_site: Path) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(built_site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with headless_chromium(network_log=True) as driver:
        yield driver


def requested_urls(browser: webdriver.Chrome) -> list[str]:
    """Every URL the browser asked for since the last call (the DevTools network log)."""
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_every_page_loads_with_no_request_off_the_machine(
    browser: webdriver.Chrome, site_url: str, built_site: Path
) -> None:
    requested_urls(browser)  # drop what came before
    seen: list[str] = []
    for page in nav_pages():
        path = html_of(built_site, page).relative_to(built_site).as_posix()
        browser.get(f"{site_url}/{path.removesuffix('index.html')}")
        WebDriverWait(browser, 30).until(
            ready.presence_of_element_located((By.CSS_SELECTOR, "article h1"))
        )
        assert browser.execute_script("return document.readyState") == "complete"
        assert browser.find_element(By.CSS_SELECTOR, "article h1").text.strip(), page
        assert "404" not in browser.title, page
        seen += requested_urls(browser)
    off = [u for u in seen if not u.startswith(site_url) and not u.startswith(LOCAL_SCHEMES)]
    assert seen and off == []
    assert any(u.endswith(".css") for u in seen) and any(u.endswith(".js") for u in seen)


def test_search_finds_blue_green_offline(browser: webdriver.Chrome, site_url: str) -> None:
    requested_urls(browser)
    browser.get(f"{site_url}/")
    box = WebDriverWait(browser, 10).until(
        ready.element_to_be_clickable((By.CSS_SELECTOR, "input.md-search__input"))
    )
    box.click()
    box.send_keys("blue/green")
    results = WebDriverWait(browser, 30).until(
        ready.presence_of_all_elements_located((By.CSS_SELECTOR, ".md-search-result__item a"))
    )
    links = [r.get_attribute("href") or "" for r in results]
    assert any("/guide/reindex/" in link for link in links), links
    off = [u for u in requested_urls(browser) if not u.startswith((site_url, *LOCAL_SCHEMES))]
    assert off == []
