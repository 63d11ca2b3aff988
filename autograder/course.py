"""The course directory: where assignments live and how nbgrader is configured for it."""
from __future__ import annotations

import functools
import logging
from pathlib import Path

import nbformat
import nbgrader.api
from alembic.script import ScriptDirectory
from nbformat import NotebookNode
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_FILE = Path(__file__).resolve().with_name("nbgrader_config.py")
SOURCE = "source"
RELEASE = "release"
MUTANTS = Path("autograder") / "mutants"
DESIGNS = Path("autograder") / "designs"


class CourseError(Exception):
    """A problem that stops an autograder command; the first line of its message says why."""


def course_root(root: Path | str | None = None) -> Path:
    """Return the course root: ``root`` if given, else the repository this package lives in."""
    return Path(root).resolve() if root is not None else REPO_ROOT


def list_assignments(root: Path | str | None = None) -> list[str]:
    """Return the sorted names of all assignments under ``source/``."""
    source = course_root(root) / SOURCE
    if not source.is_dir():
        return []
    return sorted(d.name for d in source.iterdir() if (d / f"{d.name}.ipynb").is_file())


def resolve_assignments(names: list[str], root: Path | str | None = None) -> list[str]:
    """Return ``names`` (or every assignment when empty), failing on an unknown name."""
    known = list_assignments(root)
    for name in names:
        if name not in known:
            raise CourseError(f"unknown assignment {name!r} (known: {', '.join(known) or 'none'})")
    return list(names) or known


def source_notebook(assignment: str, root: Path | str | None = None) -> Path:
    """Path of the instructor notebook ``source/<assignment>/<assignment>.ipynb``."""
    return course_root(root) / SOURCE / assignment / f"{assignment}.ipynb"


def release_notebook(assignment: str, root: Path | str | None = None) -> Path:
    """Path of the committed student notebook ``release/<assignment>/<assignment>.ipynb``."""
    return course_root(root) / RELEASE / assignment / f"{assignment}.ipynb"


def mutants_dir(assignment: str, root: Path | str | None = None) -> Path:
    """Directory holding the mutants of ``assignment``."""
    return course_root(root) / MUTANTS / assignment


def designs_dir(assignment: str, root: Path | str | None = None) -> Path:
    """Directory holding the alternative correct designs of ``assignment``'s design exercises."""
    return course_root(root) / DESIGNS / assignment


def read_notebook(path: Path | str) -> NotebookNode:
    """Read and validate a notebook, raising :class:`CourseError` if it is not one."""
    path = Path(path)
    try:
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
    except FileNotFoundError:
        raise CourseError(f"{path}: no such file") from None
    except Exception as exc:  # nbformat raises several unrelated types for bad input
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CourseError(f"{path}: not a valid Jupyter notebook ({reason})") from None
    return nb


def nbgrader_config(root: Path | str, sandbox: str | None = None) -> Config:
    """The course's nbgrader config with its course directory moved to ``root``.

    The course config file is the single source of settings; only the location of the
    course directory and of its gradebook change, and, if given, where kernels run
    (``sandbox``: a mode of :data:`autograder.warm_kernels.MODES`; the file says "required").
    """
    root = Path(root).resolve()
    config = PyFileConfigLoader(CONFIG_FILE.name, str(CONFIG_FILE.parent)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    if sandbox is not None:
        config.WarmKernelManager.sandbox = sandbox
    return config


def quiet_logger() -> logging.Logger:
    """A logger that swallows nbgrader's logs; NbGraderAPI results carry them instead."""
    log = logging.getLogger("autograder.nbgrader")
    log.propagate = False
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    log.setLevel(logging.INFO)
    return log


@functools.cache
def alembic_head() -> str:
    """The gradebook schema revision nbgrader stamps on a new gradebook, read in-process.

    nbgrader 0.9 runs the ``alembic`` script in a subprocess for every new gradebook to
    find it: seconds each time, and it fails when the venv's scripts are not on ``PATH``.
    """
    return ScriptDirectory(str(Path(nbgrader.__file__).parent / "alembic")).get_current_head()


def make_api(root: Path | str, sandbox: str | None = None) -> NbGraderAPI:
    """An ``NbGraderAPI`` for the course directory ``root`` (``sandbox``: see nbgrader_config), logging nowhere."""
    nbgrader.api.get_alembic_version = alembic_head  # nbgrader is pinned (0.9.6)
    config = nbgrader_config(root, sandbox)
    log = quiet_logger()
    coursedir = CourseDirectory(config=config, log=log)
    return NbGraderAPI(coursedir=coursedir, config=config, log=log)


def check_api_result(result: dict, action: str) -> None:
    """Raise :class:`CourseError` with nbgrader's log and traceback if ``result`` failed."""
    if result.get("success"):
        return
    details = "\n".join(part for part in (result.get("log"), result.get("error")) if part)
    raise CourseError(f"nbgrader {action} failed\n{details}".rstrip())
