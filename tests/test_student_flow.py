"""The student flow in a real JupyterLab, driven by a headless browser.

A throwaway JupyterLab (this venv: nbgrader's lab and server extensions enabled) serves a
temporary directory holding two copies of assignment 01 under its release file name:

* ``unsolved/``: the release notebook as students get it. Open it, Run -> Run All Cells,
  press Validate: the dialog must report failing cells (``NotImplementedError``), and the
  notebook's kernel must still answer afterwards.
* ``solved/``: the source notebook (solutions and hidden tests) saved under the release
  name, as a student who solved everything would hand it in. Validate must report success.

The server runs in the temporary directory with a ``nbgrader_config.py`` that loads the
course config and only moves the course directory there, so Validate uses the course's
settings (cell timeout, kernel) and nothing is written into the repository. Jupyter's
config, data, runtime and settings directories are temporary too; the browser only reaches
127.0.0.1 (every other request is aborted and recorded).

Needs Debian's ``/usr/bin/chromium`` and the ``playwright`` package (never ``playwright
install``). Without them the test is skipped, unless ``REQUIRE_BROWSER=1`` (set by CI's
``.ci/run``), in which case it fails. Screenshots of both dialogs land in ``tmp_path``.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from browser import CHROMIUM, CHROMIUM_ARGS, load_playwright

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "01_replicated_training"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
RELEASE_NB = ROOT / "release" / ASSIGNMENT / NOTEBOOK
SOURCE_NB = ROOT / "source" / ASSIGNMENT / NOTEBOOK
COURSE_CONFIG = ROOT / "autograder" / "nbgrader_config.py"
VENV_BIN = Path(sys.executable).parent
JUPYTER = VENV_BIN / "jupyter"

# Every wait is bounded. Validate re-runs the whole notebook in a fresh kernel; on a loaded
# 2-core machine that takes tens of seconds, so it gets the most room.
SERVER_START_S = 60
PAGE_LOAD_S = 60
KERNEL_S = 60
RUN_ALL_S = 90
VALIDATE_S = 120
UI_S = 15


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, log) -> None:
    """Stop the server and every process it started (kernels, their gloo workers), by pid."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if proc.poll() is None:
        # Jupyter shuts down cleanly (a SIGINT may be ignored: CI runs in the background)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for child in children:  # whatever it left behind; psutil refuses a reused pid
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=10)
    log.close()


class Lab:
    """A running JupyterLab: its address, token, directory and log."""

    def __init__(self, port: int, token: str, root: Path, log_path: Path) -> None:
        self.port, self.token, self.root, self.log_path = port, token, root, log_path
        self.base = f"http://127.0.0.1:{port}"

    def url(self, path: str) -> str:
        return f"{self.base}{path}?token={self.token}"

    def api(self, path: str):
        with urllib.request.urlopen(self.url(path), timeout=10) as r:
            return json.loads(r.read())

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    load_playwright()  # skip (or fail) before starting anything
    base = tmp_path_factory.mktemp("student_flow")
    root = base / "lab"
    for name, notebook in (("unsolved", RELEASE_NB), ("solved", SOURCE_NB)):
        (root / name).mkdir(parents=True)
        shutil.copy(notebook, root / name / NOTEBOOK)
    # Validate reads nbgrader_config.py from the server's working directory: the course
    # config, with the course directory (and so the gradebook) moved out of the repository
    # to the server root (nbgrader's formgrader wants it inside the root).
    (root / "nbgrader_config.py").write_text(
        f"load_subconfig({str(COURSE_CONFIG)!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(root)!r}  # noqa: F821\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(root / 'gradebook.db')!r}  # noqa: F821\n"
    )
    config_dir = base / "jupyter_config"
    config_dir.mkdir()
    # No news feed and no update check: the server would fetch them from the internet.
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate"},
    }))
    settings = base / "lab_settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))

    env = dict(os.environ)
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",  # nbgrader's kernel = this venv
        JUPYTER_CONFIG_DIR=str(config_dir),
        JUPYTER_DATA_DIR=str(base / "jupyter_data"),
        JUPYTER_RUNTIME_DIR=str(base / "jupyter_runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(base / "lab_settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "lab_workspaces"),
        IPYTHONDIR=str(base / "ipython"),
        MPLBACKEND="Agg",
    )
    env.pop("JUPYTER_PATH", None)
    port, token = _free_port(), secrets.token_hex(16)
    log_path = base / "jupyter.log"
    log = open(log_path, "w")
    cmd = [str(JUPYTER), "lab", "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
           "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
    if os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    proc = subprocess.Popen(
        cmd,
        cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )
    server = Lab(port, token, root, log_path)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                server.api("/api/status")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not answer within {SERVER_START_S} s:\n{server.log_tail()}")
                time.sleep(0.5)
        yield server
    finally:
        _stop(proc, log)


@dataclass
class Browser:
    context: object
    blocked: list  # URLs of requests that tried to leave 127.0.0.1 (aborted)


@pytest.fixture(scope="module")
def browser(lab, tmp_path_factory):
    """A headless chromium context that may only talk to the lab server."""
    sync_playwright = load_playwright()
    blocked: list[str] = []

    def only_local(route) -> None:
        host = urllib.parse.urlsplit(route.request.url).hostname
        if host == "127.0.0.1":
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    pw = sync_playwright().start()
    try:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium_profile")),
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            context.route("**/*", only_local)
            yield Browser(context, blocked)
        finally:
            context.close()
    finally:
        pw.stop()


def _graded_test_cells(notebook: Path) -> int:
    cells = json.loads(notebook.read_text())["cells"]
    return sum(1 for c in cells if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("grade"))


# ---------------------------------------------------------------- the student's actions

def _open_notebook(context, lab: Lab, path: str):
    page = context.new_page()
    page.set_default_timeout(UI_S * 1000)
    page.goto(lab.url(f"/lab/tree/{path}"), timeout=PAGE_LOAD_S * 1000)
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(timeout=PAGE_LOAD_S * 1000)
    page.locator(".validate-button").wait_for(timeout=PAGE_LOAD_S * 1000)  # nbgrader's lab extension
    _wait_kernel_idle(page, KERNEL_S)
    return page


def _wait_kernel_idle(page, seconds: float) -> None:
    """The status bar says the notebook's kernel is connected and idle.

    Not the toolbar's execution indicator alone: it reads "idle" while the status bar still
    says "No Kernel | Initializing", and Run All in that window silently runs nothing.
    """
    page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-StatusBar-TextItem')]
                   .some(t => t.textContent.trim() === 'Python 3 (ipykernel) | Idle')
              && document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')
                   ?.dataset.status === 'idle'""",
        timeout=seconds * 1000, polling=250,
    )


_RUN_STATE = """() => ({
    status: document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')?.dataset.status,
    prompts: [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')]
             .map(p => p.textContent.trim()),
})"""


def _run_all(page, seconds: float, screenshot: Path) -> dict:
    """Run -> Run All Cells from the menu bar; wait until nothing is queued and the kernel is idle."""
    page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Run").first.click()
    page.locator('.lm-Menu li[data-command="runmenu:run-all"]').click()
    started = time.monotonic()
    deadline = started + seconds
    while True:
        state = page.evaluate(_RUN_STATE)
        if state["prompts"] and state["prompts"][0] == "[ ]:" and time.monotonic() > started + UI_S:
            page.screenshot(path=str(screenshot))
            pytest.fail(f"Run All did not start the first code cell within {UI_S} s: {state}; see {screenshot}")
        prompts = state["prompts"]
        if (state["status"] == "idle" and prompts and prompts[0].startswith("[1]")
                and not any("*" in p for p in prompts)):
            return state
        if time.monotonic() > deadline:
            page.screenshot(path=str(screenshot))
            pytest.fail(f"Run All did not finish within {seconds} s; last state {state}; see {screenshot}")
        page.wait_for_timeout(250)


def _validate(page, lab: Lab, screenshot: Path):
    """Press Validate, wait for nbgrader's result dialog, screenshot it; return the dialog."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.locator(".validate-button").get_by_text("Validate").click()
    dialog = page.locator(".jp-Dialog")
    try:
        dialog.locator(".jp-Dialog-header", has_text="Validation Results").wait_for(timeout=VALIDATE_S * 1000)
    except PlaywrightTimeout:
        page.screenshot(path=str(screenshot))
        pytest.fail(f"no Validation Results dialog within {VALIDATE_S} s (see {screenshot}); "
                    f"server log:\n{lab.log_tail()}")
    page.screenshot(path=str(screenshot))
    return dialog


def _close_dialog(page, dialog) -> None:
    dialog.get_by_role("button", name="Ok").click()
    dialog.wait_for(state="detached", timeout=UI_S * 1000)


def _kernel_answers(page) -> None:
    """Add a cell under the last one, run it, read its output: the kernel and page respond."""
    page.locator(".jp-NotebookPanel .jp-Cell").last.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.type("print('kernel', 6 * 7)")
    page.keyboard.press("Shift+Enter")
    page.locator(".jp-NotebookPanel .jp-OutputArea-output", has_text="kernel 42").wait_for(timeout=KERNEL_S * 1000)


# ---------------------------------------------------------------- the two cases

def test_release_notebook_run_all_then_validate_reports_failures(lab, browser, tmp_path):
    page = _open_notebook(browser.context, lab, f"unsolved/{NOTEBOOK}")
    state = _run_all(page, RUN_ALL_S, tmp_path / "run_all_timeout.png")
    # The imports ran, then the first exercise raised and the rest of the queue was dropped.
    assert state["prompts"][:3] == ["[1]:", "[2]:", "[3]:"], state
    # Run All stopped at the first unimplemented exercise, as a student would see it.
    assert page.locator(".jp-NotebookPanel .jp-OutputArea-output", has_text="NotImplementedError").count() >= 1

    dialog = _validate(page, lab, tmp_path / "validate_release.png")
    body = dialog.locator(".jp-Dialog-body")
    assert dialog.locator(".validation-failed").count() == 1, body.inner_text()
    text = body.inner_text()
    # Validate runs the whole notebook: every graded test cell is listed, not just the first.
    assert text.count("The following cell failed:") == _graded_test_cells(RELEASE_NB), text[:2000]
    assert "NotImplementedError" in text
    assert "average_on_rank(average_gradients" in text, text[:2000]
    assert "Success!" not in text

    _close_dialog(page, dialog)
    _kernel_answers(page)
    assert not browser.blocked, f"the browser tried to leave 127.0.0.1: {browser.blocked}"


def test_solved_notebook_validates(lab, browser, tmp_path):
    page = _open_notebook(browser.context, lab, f"solved/{NOTEBOOK}")
    state = _run_all(page, RUN_ALL_S, tmp_path / "run_all_timeout.png")
    # Run All stops at the first error, so every code cell numbered in order means none raised.
    assert state["prompts"] == [f"[{i}]:" for i in range(1, len(state["prompts"]) + 1)], state
    dialog = _validate(page, lab, tmp_path / "validate_solved.png")
    body = dialog.locator(".jp-Dialog-body")
    assert dialog.locator(".validation-success").count() == 1, body.inner_text()
    assert "Success! Your notebook passes all the tests." in body.inner_text()
    _close_dialog(page, dialog)
    assert not browser.blocked, f"the browser tried to leave 127.0.0.1: {browser.blocked}"
