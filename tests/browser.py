"""The headless Chromium the browser tests drive (tests/test_student_flow.py, tests/test_book.py).

Without chromium or playwright a browser test is skipped, or fails when CI says one must be
there (``REQUIRE_BROWSER=1``, set by ``.ci/run``).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def require(ok: bool, reason: str) -> None:
    """Skip without a browser, or fail if CI said one must be there (REQUIRE_BROWSER=1)."""
    if ok:
        return
    if os.environ.get("REQUIRE_BROWSER") == "1":
        pytest.fail(f"REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(f"{reason} (set REQUIRE_BROWSER=1 to make this a failure)")


def load_playwright():
    """playwright's ``sync_playwright``, once chromium and playwright are known to be there."""
    try:
        from playwright.sync_api import sync_playwright as playwright
    except ImportError:
        require(False, "the playwright package is not installed (pip install -r requirements.txt)")
    require(CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing (apt-get install chromium)")
    return playwright
