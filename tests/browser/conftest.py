"""Playwright on Debian's headless Chromium, against the admin served by pytest-django's live server.

No browser is downloaded: the tests drive ``/usr/bin/chromium`` (``apt-get install chromium``). Without
it, or without the ``playwright`` package, they are skipped locally and fail in CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django.contrib.admin
import pytest
from django.test.utils import override_settings

CHROMIUM = os.environ.get("JOBS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
#: Set to a directory (e.g. docs) to keep the screenshots the README and the documentation show.
SCREENSHOTS = os.environ.get("JOBS_SCREENSHOTS", "")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    # Playwright's sync API keeps an event loop running in this thread; the ORM calls the tests make
    # around it are still plain synchronous code. Both end with the module.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def expect(browser: Any) -> Any:
    """Playwright's auto-waiting assertions (imported here, so a missing package skips, not errors)."""
    from playwright.sync_api import expect

    return expect


@pytest.fixture(scope="session", autouse=True)
def _admin_static() -> Iterator[None]:
    """Serve the admin's CSS and JS from the live server (the test settings have no staticfiles
    app); enabled before the session-scoped live server builds its static handler."""
    root = Path(django.contrib.admin.__file__).parent / "static"
    with override_settings(STATIC_URL="/static/", STATIC_ROOT=str(root)):
        yield


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    dialogs: list[str] = []
    tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    yield tab
    context.close()
    assert not dialogs, f"a script ran in the page: {dialogs}"


@pytest.fixture
def screenshot(tmp_path: Path) -> Any:
    def take(tab: Any, name: str, full_page: bool = False) -> Path:
        target = Path(SCREENSHOTS or tmp_path) / f"{name}.png"
        tab.screenshot(path=str(target), full_page=full_page)
        return target

    return take
