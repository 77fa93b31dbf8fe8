"""Browser tests: the `playwright` package drives Debian's Chromium (/usr/bin/chromium; never
`playwright install`) against pytest-django's live server.

Where Chromium or playwright is missing, the tests are skipped with the reason — unless
MEMORYHUB_REQUIRE_BROWSER_TESTS=1 (.ci/run sets it), where that is a failure. Screenshots of every step
go to test-artifacts/browser/.
"""

import os
from pathlib import Path
from unittest import mock

import pytest
from django.contrib.auth.models import User

from tests.indexing.conftest import eager_tasks  # noqa: F401 (for every test here: tasks run in the server thread)

BASE_DIR = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = BASE_DIR / "test-artifacts" / "browser"
OPERATOR = ("operator", "a-long-operator-password")


def skip_or_fail(reason: str):
    if os.environ.get("MEMORYHUB_REQUIRE_BROWSER_TESTS") == "1":
        pytest.fail(f"MEMORYHUB_REQUIRE_BROWSER_TESTS=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="package")
def browser():
    """One Chromium for all browser tests. Package-scoped rather than session-scoped because playwright's
    sync API keeps an asyncio loop running in this thread while it is started, which would make Django
    refuse ORM calls (SynchronousOnlyOperation) in every later test; it is stopped when this package ends."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("the playwright package is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        skip_or_fail(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # The test code's own ORM calls run while that loop is running: allow them for this package only.
    with mock.patch.dict(os.environ, {"DJANGO_ALLOW_ASYNC_UNSAFE": "true"}):
        with sync_playwright() as playwright:
            try:
                chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            except Exception as exc:  # a broken install: same treatment as a missing one
                skip_or_fail(f"Chromium at {CHROMIUM} does not start: {exc.__class__.__name__}: {exc}")
            yield chromium
            chromium.close()


@pytest.fixture
def page(browser, live_server, transactional_db, fake_embeddings):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def shot(request):
    """shot(page, "03-token") saves test-artifacts/browser/<test>-03-token.png (full page)."""

    def save(page, name: str) -> Path:
        path = ARTIFACTS / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


@pytest.fixture
def logged_in(page, shot):
    """Log in through the admin's login form as a superuser."""
    User.objects.create_superuser(OPERATOR[0], "operator@example.com", OPERATOR[1])
    page.goto("/admin/login/")
    page.fill("#id_username", OPERATOR[0])
    page.fill("#id_password", OPERATOR[1])
    shot(page, "01-login")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    return page
