"""Headless Chromium for the tests of what a person sees (Debian's `chromium` +
`chromium-driver`, driven by Selenium), with every host but 127.0.0.1 unresolvable: an asset
fetched from a CDN fails to load, so a page that needs one does not render."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


@contextmanager
def headless_chromium(*, network_log: bool = False) -> Iterator[webdriver.Chrome]:
    """A browser with the network cut; `network_log` records the DevTools performance log
    (every request the pages make), read with `driver.get_log("performance")`."""
    driver_path = shutil.which("chromedriver")
    assert driver_path, "chromium-driver is not installed (make test installs it)"
    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        # the network is cut: only the servers under test resolve
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ):
        options.add_argument(arg)
    if network_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
