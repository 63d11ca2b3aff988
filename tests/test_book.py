"""The chapters as a book (issue 13 part 3): ``python book/build.py``, what ``make book`` runs.

The session fixture builds the book once, into a temporary directory, from the execution cache
that nbval's run of the chapters fills (``book/nbval_book.py``; ``make test`` runs the chapters
under nbval just before these tests, so the build runs none); a chapter the cache lacks runs
under nbval first, and one that fails fails the build. How the build fails, and what it runs
again, is tested on tiny chapters in ``tests/test_nbval_book.py``.

Without a browser: one page per chapter, each with executed outputs; figures as images; the
home page with the module sentence and every lesson's title and the estimate its first cell
states; on every lesson page, JupyterLab links to the chapter and its assignment.

In Debian's headless chromium (skipped without it unless ``REQUIRE_BROWSER=1``), the site
served by ``python -m http.server`` on 127.0.0.1 (every other request is aborted and fails the
test): mark a lesson done, reload, see it marked on its page and on the list; with
``localStorage`` throwing on access (an init script, and for real in a sandboxed iframe) every
page loads without a script error and says that progress is unavailable.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, load_playwright

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "book" / "build.py"
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MODULE_SENTENCE = "Every lesson is open. Progress is optional and saved only in this browser when available."
LAB = "http://localhost:8888/lab/tree/"  # book/conf.py's default lab_url
BUILD_TIMEOUT_S = 1800  # from the cache: seconds; running all ten chapters: 34 s on the idle 2-core machine
pytestmark = pytest.mark.alone  # chapters' gloo groups slow down many times beside the course check
UI_S = 15_000  # milliseconds, for playwright
# The estimate exactly as the chapter states it, read here independently of book/lessons.py.
ESTIMATE = re.compile(r"about (\d+) minutes", re.IGNORECASE)


def chapter_facts(path: Path) -> tuple[str, str]:
    """(title without its number, core minutes) from the chapter's first cell."""
    first = "".join(json.loads(path.read_text())["cells"][0]["source"])
    heading = first.splitlines()[0]
    assert heading.startswith("# "), f"{path.name}: first line is not a title: {heading!r}"
    title = re.sub(r"^\d+\.\s+", "", heading[2:]).strip()
    return title, ESTIMATE.search(first).group(1)


def run_build(out: Path, *args: str) -> subprocess.CompletedProcess:
    """``book/build.py --out OUT ARGS``, with the default JupyterLab address."""
    env = {k: v for k, v in os.environ.items() if k != "BOOK_LAB_URL"}
    return subprocess.run([sys.executable, str(BUILD), "--out", str(out), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)


@pytest.fixture(scope="session")
def book(tmp_path_factory) -> Path:
    """The book, built once per test session from the execution cache (see above); its output directory."""
    out = tmp_path_factory.mktemp("book") / "html"
    start = time.monotonic()
    proc = run_build(out)
    seconds = time.monotonic() - start
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"book build failed after {seconds:.0f} s:\n{log[-6000:]}"
    found = re.search(r"execution cache .*: (\d+) of (\d+) chapter\(s\) found", proc.stdout)
    print(f"\nbook built in {seconds:.1f} s ({found[1]} of {found[2]} chapters from the execution cache)")
    return out


# --- without a browser --------------------------------------------------------------------


class Page(HTMLParser):
    """What these tests read of a built page: links, figure images, outputs, text, list items."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []  # images of executed outputs: MyST-NB writes them to _images/
        self.outputs = 0  # executed cell outputs
        self.items: list[str] = []  # the text of each <li class="lesson-item">
        self.text: list[str] = []
        self._li_depth = 0
        self._item_at: int | None = None
        self.feed(path.read_text())

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        elif tag == "img" and "/_images/" in "/" + a.get("src", ""):
            self.images.append(a["src"])
        elif tag == "div" and "cell_output" in classes:
            self.outputs += 1
        elif tag == "li":
            self._li_depth += 1
            if "lesson-item" in classes:
                self._item_at = self._li_depth
                self.items.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "li":
            if self._item_at == self._li_depth:
                self._item_at = None
            self._li_depth -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._item_at is not None:
            self.items[-1] += data

    @property
    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())


def test_there_are_ten_chapters() -> None:
    assert [p.name[:2] for p in CHAPTERS] == [f"{n:02d}" for n in range(1, 11)]


def test_one_page_per_chapter(book: Path) -> None:
    pages = sorted(p.stem for p in (book / "notebooks").glob("*.html"))
    assert pages == [p.stem for p in CHAPTERS]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_lesson_page_has_outputs_and_lab_links(book: Path, chapter: Path) -> None:
    page = Page(book / "notebooks" / f"{chapter.stem}.html")
    assert page.outputs >= 3, f"{chapter.stem}: {page.outputs} executed outputs on the page"
    title, _ = chapter_facts(chapter)
    assert title in page.plain
    for img in page.images:  # every figure the chapter drew is an image file of the site
        assert (book / "notebooks" / urllib.parse.unquote(img)).resolve().is_file(), img
    chapter_link = f"{LAB}notebooks/{chapter.name}"
    assignment = f"release/{chapter.stem}/{chapter.name}"
    assert chapter_link in page.links
    assert f"{LAB}{assignment}" in page.links
    assert (ROOT / assignment).is_file(), f"the lesson page links to {assignment}, which is missing"
    assert "lesson-done-toggle" in (book / "notebooks" / f"{chapter.stem}.html").read_text()


def test_every_lesson_page_shows_a_figure(book: Path) -> None:
    """Every chapter draws at least one matplotlib figure; its page shows it as an image."""
    figures = {p.stem: len(Page(book / "notebooks" / f"{p.stem}.html").images) for p in CHAPTERS}
    assert all(figures.values()), figures


def test_home_is_the_module_page(book: Path) -> None:
    home = Page(book / "index.html")
    assert MODULE_SENTENCE in home.plain
    assert len(home.items) == len(CHAPTERS)
    for chapter, item in zip(CHAPTERS, home.items):
        title, minutes = chapter_facts(chapter)
        text = " ".join(item.split())
        assert text.startswith(chapter.stem[:2]), text
        assert title in text, (chapter.stem, text)
        assert f"about {minutes} min" in text, (chapter.stem, text)
        assert f"notebooks/{chapter.stem}.html" in home.links


def test_repository_links_in_chapters_open_in_lab(book: Path) -> None:
    """A chapter's ``../release/...`` link becomes a JupyterLab link, not a broken site link."""
    for chapter in CHAPTERS:
        links = Page(book / "notebooks" / f"{chapter.stem}.html").links
        assert not [h for h in links if h.startswith("../release") or h.startswith("../notebooks")], chapter.stem


# --- in the browser -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def site(book: Path) -> Iterator[str]:
    """The book's parent directory over http on 127.0.0.1 (the book is at <site>/html/)."""
    (book.parent / "sandboxed.html").write_text(
        '<!doctype html><title>sandboxed</title>'
        '<iframe sandbox="allow-scripts" src="html/index.html" width="1000" height="700"></iframe>'
        '<iframe sandbox="allow-scripts" src="html/notebooks/01_replicated_training.html"'
        ' width="1000" height="700"></iframe>')
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                            cwd=book.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # a hang guard: it starts in well under a second
        while True:
            try:
                urllib.request.urlopen(f"{base}/html/index.html", timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "http.server did not start"
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# Recorded in every frame (init scripts run in iframes too): a sandboxed frame's errors do not
# all reach playwright's page events.
RECORD_ERRORS = """
window.__errors = [];
window.addEventListener("error", (e) => window.__errors.push(String(e.message || e)));
window.addEventListener("unhandledrejection", (e) => window.__errors.push(String(e.reason)));
"""
# A sandboxed frame has an opaque origin, so the browser fetches its web fonts with CORS, which
# http.server does not answer: resource errors of the embedding, not script errors of the book.
SANDBOX_FONT_ERRORS = re.compile(r"^console: (Access to font at '[^']+' from origin 'null' has been "
                                 r"blocked by CORS policy|Failed to load resource: net::ERR_FAILED$)")
NO_STORAGE = """
for (const name of ["localStorage", "sessionStorage"]) {
  Object.defineProperty(window, name, {configurable: true, get() {
    throw new DOMException("Access is denied for this document.", "SecurityError"); }});
}
"""


class Watched:
    """A browser context whose page errors, console errors and off-machine requests are kept."""

    def __init__(self, context) -> None:
        self.context, self.errors, self.blocked = context, [], []
        context.route("**/*", self._only_local)
        context.add_init_script(RECORD_ERRORS)

    def _only_local(self, route) -> None:
        if urllib.parse.urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def page(self):
        page = self.context.new_page()
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        return page

    def assert_clean(self, ignore: re.Pattern | None = None) -> None:
        errors = [e for e in self.errors if ignore is None or not ignore.search(e)]
        assert not errors, errors
        assert not self.blocked, f"the book asked for something off this machine: {self.blocked}"


@pytest.fixture(scope="module")
def chromium(site: str):
    sync_playwright = load_playwright()
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


@pytest.fixture
def watched(chromium) -> Iterator[Watched]:
    context = chromium.new_context(viewport={"width": 1300, "height": 900})
    try:
        yield Watched(context)
    finally:
        context.close()


def _math_rendered(page) -> None:
    page.wait_for_function("document.querySelector('.MathJax, .MathJax_Display') !== null", timeout=UI_S)


def test_mark_done_is_kept_and_listed(site: str, watched: Watched) -> None:
    lesson = CHAPTERS[1].stem
    page = watched.page()
    page.goto(f"{site}/html/notebooks/{lesson}.html")
    button = page.locator(".lesson-done-toggle")
    button.wait_for(state="visible", timeout=UI_S)
    assert button.get_attribute("aria-pressed") == "false"
    assert button.inner_text() == "Mark as done"
    _math_rendered(page)  # MathJax is part of the site: it renders with no network
    button.click()
    assert button.get_attribute("aria-pressed") == "true"

    page.reload()
    button.wait_for(state="visible", timeout=UI_S)
    assert button.get_attribute("aria-pressed") == "true"
    assert "mark as not done" in button.inner_text()

    page.goto(f"{site}/html/index.html")
    status = page.locator(f'.lesson-status[data-lesson="{lesson}"]')
    status.wait_for(state="visible", timeout=UI_S)
    assert "done" in status.inner_text()
    done = page.locator("li.lesson-item.is-done .lesson-status").evaluate_all(
        "els => els.map(e => e.dataset.lesson)")
    assert done == [lesson]
    assert (page.locator(".progress-summary").inner_text()
            == f"1 of {len(CHAPTERS)} lessons marked done in this browser.")

    page.goto(f"{site}/html/notebooks/{lesson}.html")  # and back: undo
    page.locator(".lesson-done-toggle").click()
    page.goto(f"{site}/html/index.html")
    page.locator(".progress-summary").wait_for(state="visible", timeout=UI_S)
    assert page.locator("li.lesson-item.is-done").count() == 0
    assert page.evaluate("window.__errors") == []
    watched.assert_clean()


def test_without_storage_every_page_works(site: str, watched: Watched) -> None:
    watched.context.add_init_script(NO_STORAGE)
    page = watched.page()
    for path in ["index.html", *(f"notebooks/{p.stem}.html" for p in CHAPTERS[:2])]:
        page.goto(f"{site}/html/{path}")
        page.wait_for_load_state("load")
        assert page.evaluate("window.bookStorage.persistent") is False
        if path == "index.html":
            summary = page.locator(".progress-summary")
            summary.wait_for(state="visible", timeout=UI_S)
            assert "unavailable" in summary.inner_text()
            assert page.locator("li.lesson-item").count() == len(CHAPTERS)
        else:
            assert page.locator(".lesson-done-toggle").is_hidden()
            assert "unavailable" in page.locator(".lesson-progress-note").inner_text()
            _math_rendered(page)
        assert page.evaluate("window.__errors") == []
    watched.assert_clean()


def test_sandboxed_iframe_has_no_storage_and_no_error(site: str, watched: Watched) -> None:
    """A sandboxed iframe without allow-same-origin: chromium itself refuses localStorage."""
    page = watched.page()
    page.goto(f"{site}/sandboxed.html")
    page.wait_for_load_state("load")
    frames = [f for f in page.frames if f != page.main_frame]
    assert len(frames) == 2
    for frame in frames:
        frame.wait_for_selector(".lesson-progress-note, .progress-summary", state="attached", timeout=UI_S)
        frame.wait_for_function("document.readyState === 'complete'", timeout=UI_S)
        # chromium refused the storage; storage-guard.js put a stand-in in its place
        assert frame.evaluate("(() => { try { localStorage.getItem('x'); return 'ok'; }"
                              " catch (e) { return e.name; } })()") == "ok"
        assert frame.evaluate("window.bookStorage.persistent") is False
        assert frame.evaluate("window.__errors") == []
    note = frames[1].locator(".lesson-progress-note")
    assert "unavailable" in note.inner_text()
    assert frames[1].locator(".lesson-done-toggle").is_hidden()
    assert "unavailable" in frames[0].locator(".progress-summary").inner_text()
    watched.assert_clean(ignore=SANDBOX_FONT_ERRORS)
