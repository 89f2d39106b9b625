"""The web console as each real user sees it, with file permissions mirrored: headless
Chromium (Selenium) against the HTTP API of a folder whose files have owners, groups and
modes, each test user's API key mapped to that user (`server.api_key_principals`). The Files
page lists exactly the files `runuser -u USER -- cat` reads; a forbidden file's page is an
error with none of its chunks; the Ask page's answer, sources and candidates hold only
readable files, and no forbidden file's name or text appears anywhere on the page. With no
key, only the files everyone may read.
"""

from __future__ import annotations

import shutil
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from ragstream import api
from ragstream.core.settings import Settings
from ragstream.core.source_config import FolderConfig
from ragstream.http import Serving, serving
from ragstream.query.engine import QueryEngine
from ragstream.service.served import ServedIndex
from tests.e2e.test_console_browser import _ask
from tests.e2e.test_docs_browser import browser  # noqa: F401 (the fixture)
from tests.harness.users import cat_readable, real_users, shared_root

pytestmark = pytest.mark.slow  # real users, a server and a browser

QUESTION = "Where is green tea steeped at 80 degrees?"
FILES = {  # path under the root -> (owner, group, mode, the word only this file holds)
    "open/tea.md": ("root", "root", 0o644, "juniper"),
    "team/plan.md": ("rsperm_alice", "rsperm_eng", 0o640, "saffron"),
    "ops.md": ("root", "rsperm_ops", 0o640, "cobalt"),
    "secret.md": ("rsperm_alice", "rsperm_alice", 0o600, "ember"),
}


@dataclass(frozen=True)
class Folder:
    docs: Path
    settings: Settings
    users: list[str]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Folder]:
    users = sorted(real_users())
    base = shared_root()
    docs = base / "docs"
    for sub in ("", "open", "team"):
        (docs / sub).mkdir(exist_ok=True)
        (docs / sub).chmod(0o755)
    for rel, (owner, group, mode, word) in FILES.items():
        path = docs / rel
        path.write_text(
            f"# {word.title()}\n\nGreen tea is steeped at 80 degrees in the {word} room.\n"
        )
        shutil.chown(path, owner, group)
        path.chmod(mode)
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("console-perm") / "data",
        embedder="static",
        sources=[FolderConfig(name="docs", root=docs, permissions="posix")],
        server={"api_key_principals": {f"key-{u}": {"user": u} for u in users}},
    )
    report = api.sync([docs], settings=settings)
    assert report.docs_seen == len(FILES) and not report.dead_letters
    yield Folder(docs, settings, users)
    shutil.rmtree(base, ignore_errors=True)


def readable(folder: Folder, user: str) -> set[str]:
    """The oracle: the doc ids whose file `runuser -u user -- cat` reads."""
    return {f"docs:{rel}" for rel in FILES if cat_readable(user, folder.docs / rel)}


def word_of(doc_id: str) -> str:
    return FILES[doc_id.removeprefix("docs:")][3]


def listed(browser: webdriver.Chrome, wait: WebDriverWait) -> set[str]:  # noqa: F811
    """The doc ids the Files page lists (its second column)."""
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#files tbody tr"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#files tbody tr")
    return {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}


def test_each_user_sees_in_the_console_exactly_what_they_can_cat(
    folder: Folder,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    truths = {user: readable(folder, user) for user in folder.users}
    assert len({frozenset(t) for t in truths.values()}) == len(folder.users)  # all differ
    everyone = set.intersection(*truths.values())
    assert everyone == {"docs:open/tea.md"}
    wait = WebDriverWait(browser, 120)
    with (
        QueryEngine.open(folder.settings) as engine,
        serving(Serving(folder.settings, ServedIndex(engine)), "127.0.0.1", 0) as url,
    ):
        browser.get(f"{url}/")
        for user, truth in truths.items():
            key = f"key-{user}"
            forbidden = {f"docs:{rel}" for rel in FILES} - truth
            assert forbidden, user
            # the key the page sends, as typing it into the key box stores it
            browser.execute_script("localStorage.setItem('ragstream-key', arguments[0])", key)
            browser.get(f"{url}/?as={key}#files")
            assert listed(browser, wait) == truth, user
            hidden = sorted(forbidden)[0]
            browser.get(f"{url}/?as={key}#file/{urllib.parse.quote(hidden, safe='')}")
            wait.until(lambda b: b.find_element(By.ID, "file-meta").text.startswith("error"))
            assert word_of(hidden) not in browser.page_source, user
            assert browser.find_elements(By.CSS_SELECTOR, "#file-chunks tbody tr") == []
            browser.get(f"{url}/?as={key}&ask=1#ask")
            _ask(browser, wait, QUESTION)
            rows = browser.find_elements(By.CSS_SELECTOR, "#candidates tbody tr")
            candidates = {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}
            assert candidates == truth, user  # every readable file matches the question
            page = browser.page_source
            for doc_id in forbidden:
                assert doc_id not in page and word_of(doc_id) not in page, (user, doc_id)
            assert any(word_of(d) in page for d in truth), user  # the answer cites its own
        browser.execute_script("localStorage.removeItem('ragstream-key')")
        browser.get(f"{url}/?as=nobody#files")  # no key: everyone's files only
        assert listed(browser, wait) == everyone
