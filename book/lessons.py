"""The course's own Sphinx extension: the lesson list, each lesson's header, offline MathJax.

* ``{lesson-list}`` (a directive for the home page) lists every chapter ``notebooks/NN_*.ipynb``
  with its number, its title (the chapter's first heading) and the time estimate its first cell
  states, and a status slot that ``_static/progress.js`` fills from the browser's storage.
* Every chapter page gets a header under its title: links that open the chapter and its
  assignment (``release/NN_slug/NN_slug.ipynb``) in JupyterLab, and the "mark as done" control.
* Links a chapter makes into the repository (``../release/...``, ``../notebooks/...``) become
  JupyterLab links too: the site has no copy of those files.
* MathJax 3 comes from the ``django-static-mathjax`` package, copied to ``_static/mathjax/``.
"""
from __future__ import annotations

import hashlib
import html
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat
from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from helpers.lessons import LESSONS

LESSON_DOC = re.compile(r"^notebooks/\d\d_[A-Za-z0-9_]+$")
TITLE = re.compile(r"^#\s+(?:\d+\.\s+)?(?P<title>.+?)\s*$", re.MULTILINE)
CORE_MINUTES = re.compile(r"about (\d+) minutes", re.IGNORECASE)
OPTIONAL_MINUTES = re.compile(r"optional[^.;]*?about (\d+) more", re.IGNORECASE | re.DOTALL)
# A chapter's markdown link into the repository, as it stands in the notebook's JSON text.
REPO_LINK = re.compile(r"\]\(\.\./(?=(?:release|notebooks)/)")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@dataclass(frozen=True)
class Lesson:
    """One chapter as the lesson list shows it."""

    stem: str  # file name without .ipynb, e.g. "01_replicated_training"
    number: str  # "01"
    title: str  # the first heading, without its "1. " number
    core_minutes: int  # the first "about N minutes" of the first cell
    optional_minutes: int | None  # "optional ...: about M more", if the chapter has such sections

    @property
    def docname(self) -> str:
        return f"notebooks/{self.stem}"

    @property
    def estimate(self) -> str:
        """The estimate as the list shows it, e.g. "about 25 min (+19 min optional)"."""
        core = f"about {self.core_minutes} min"
        return core if self.optional_minutes is None else f"{core} (+{self.optional_minutes} min optional)"


def read_lesson(path: Path) -> Lesson:
    """Read a chapter's title and time estimate from its first cell (a markdown cell)."""
    first = nbformat.read(path, as_version=4).cells[0].source
    title, core = TITLE.search(first), CORE_MINUTES.search(first)
    if title is None or core is None:
        raise ValueError(f"{path.name}: the first cell must start with '# N. Title' and state "
                         "'about N minutes'")
    optional = OPTIONAL_MINUTES.search(first)
    return Lesson(stem=path.stem, number=path.stem[:2], title=title["title"],
                  core_minutes=int(core[1]), optional_minutes=int(optional[1]) if optional else None)


def chapter_paths(srcdir: Path) -> list[Path]:
    """The chapters of the staged source, in lesson order (:data:`helpers.lessons.LESSONS`)."""
    return [srcdir / item.chapter for item in LESSONS if (srcdir / item.chapter).is_file()]


def lab_link(app: Sphinx, repo_path: str, text: str) -> nodes.reference:
    """A link that opens ``repo_path`` (relative to the repository root) in JupyterLab."""
    return nodes.reference("", text, refuri=app.config.lab_url + repo_path, classes=["lab-link"])


class LessonList(SphinxDirective):
    """``{lesson-list}``: every chapter with number, title, estimate and progress slot."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        env = self.env
        items = nodes.bullet_list(classes=["lesson-list"])
        for path in chapter_paths(Path(env.srcdir)):
            env.note_dependency(str(path))  # a changed title or estimate rebuilds the list
            lesson = read_lesson(path)
            link = addnodes.pending_xref("", nodes.inline("", lesson.title), refdomain="std",
                                         reftype="doc", reftarget="/" + lesson.docname,
                                         refexplicit=True, refwarn=True, refdoc=env.docname)
            para = nodes.paragraph("", "", nodes.inline("", lesson.number, classes=["lesson-number"]),
                                   link, nodes.inline("", lesson.estimate, classes=["lesson-estimate"]),
                                   nodes.raw("", _status_html(lesson.stem), format="html"))
            items += nodes.list_item("", para, classes=["lesson-item"])
        summary = nodes.raw("", '<p class="progress-summary" role="status" hidden></p>', format="html")
        return [summary, items]


def _status_html(stem: str) -> str:
    return f'<span class="lesson-status" data-lesson="{html.escape(stem)}" hidden></span>'


def _control_html(stem: str) -> str:
    """The "mark as done" control; progress.js shows it only where the browser can save."""
    return (f'<div class="lesson-progress" data-lesson="{html.escape(stem)}">'
            '<button type="button" class="lesson-done-toggle" aria-pressed="false" hidden>'
            'Mark as done</button>'
            '<span class="lesson-progress-note" role="status"></span></div>')


def add_lesson_header(app: Sphinx, doctree: nodes.document) -> None:
    """Under a chapter's title: JupyterLab links to the chapter and assignment, and the control."""
    docname = app.env.docname
    if not LESSON_DOC.match(docname):
        return
    stem = docname.split("/", 1)[1]
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None or not isinstance(section[0], nodes.title):
        raise ValueError(f"{docname}: a chapter must start with its title")
    assignment = f"release/{stem}/{stem}.ipynb"
    links = nodes.paragraph(
        "", "", nodes.Text("Open in JupyterLab: "), lab_link(app, f"notebooks/{stem}.ipynb", "this chapter"),
        nodes.Text(" · "), lab_link(app, assignment, f"the graded assignment ({assignment})"))
    header = nodes.container("", links, nodes.raw("", _control_html(stem), format="html"),
                             classes=["lesson-header"])
    section.insert(1, header)


def replace_widgets(app: Sphinx, doctree: nodes.document) -> None:
    """Live explorers need a kernel: say so where the notebook shows one."""
    for raw in list(doctree.findall(nodes.raw)):
        if WIDGET_MIME in raw.astext():
            note = nodes.paragraph(
                "", "Interactive explorer: open this chapter in JupyterLab and run this cell to use it.",
                classes=["widget-note"])
            raw.replace_self(note)


def link_repo_files_to_lab(app: Sphinx, docname: str, source: list[str]) -> None:
    """A chapter's link to a repository file (``](../release/...)``) opens it in JupyterLab.

    Rewritten in the notebook's text before MyST reads it: MyST would otherwise look for a
    page of the site, and the site has no copy of the assignments.
    """
    if LESSON_DOC.match(docname):
        source[0] = REPO_LINK.sub(lambda _: "](" + app.config.lab_url, source[0])


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    """Ship MathJax inside the site (``_static/mathjax/``), so no page asks a CDN for it.

    The TeX-to-HTML bundle, its fonts and the menu's parts; not the speech engine (``sre``)
    or the SVG and MathML-input bundles, which the pages never load.
    """
    if exception is not None or app.builder.format != "html":
        return
    import mathjax  # the django-static-mathjax package: MathJax's own es5 distribution

    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    skip = shutil.ignore_patterns("sre", "*svg*", "node-main.js", "*-speech.js", "mml-chtml.js",
                                  "tex-mml-chtml.js", "tex-chtml.js")
    shutil.copytree(es5, Path(app.outdir) / "_static" / "mathjax", ignore=skip, dirs_exist_ok=True)


def setup(app: Sphinx) -> dict:
    app.add_config_value("lab_url", "http://localhost:8888/lab/tree/", "env")
    app.add_directive("lesson-list", LessonList)
    app.connect("doctree-read", add_lesson_header)
    app.connect("doctree-read", replace_widgets)
    app.connect("source-read", link_repo_files_to_lab)
    app.connect("build-finished", copy_mathjax)
    # A change of this file changes the pages it builds: Sphinx then re-reads every page.
    env_version = int(hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8], 16)
    return {"version": "1", "env_version": env_version,
            "parallel_read_safe": True, "parallel_write_safe": True}
