"""The grader's integrity check (autograder.integrity) finds every change, with or without dict versions.

After the first check only the namespaces modified since they were last compared are compared
again (CPython 3.11's dict versions); these tests run each change once with that shortcut and
once comparing every namespace, and expect the same report.
"""
from __future__ import annotations

import sys
import types

import pytest

from autograder import integrity

NOTEBOOK_CODE = "def fake(*args, **kwargs):\n    return True\n"


def _from_a_cell():
    namespace: dict = {}
    exec(compile(NOTEBOOK_CODE, "<ipython-input-1>", "exec"), namespace)  # as a notebook cell compiles it
    return namespace["fake"]


@pytest.fixture(params=[True, False], ids=["dict versions", "full comparison"])
def watched(request, monkeypatch) -> types.ModuleType:
    """A fresh check state and a watched module ``helpers.integrity_target`` holding a function and a class."""
    for name in ("_modules", "_classes", "_hooks", "_compared"):
        monkeypatch.setattr(integrity, name, {})
    monkeypatch.setattr(integrity, "_VERSIONED", request.param)
    module = types.ModuleType("helpers.integrity_target")
    exec("def allclose(a, b):\n    return a == b\nclass Checker:\n    def verify(self):\n        return False\n",
         module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert integrity.check() == ""  # the fingerprint
    assert integrity.check() == ""  # nothing changed
    return module


def test_the_course_interpreter_keeps_dict_versions() -> None:
    assert integrity._VERSIONED  # otherwise every check compares every namespace (30 ms instead of 5)


def test_a_replaced_function_is_found(watched) -> None:
    watched.allclose = _from_a_cell()
    assert integrity.check() == "helpers.integrity_target.allclose was replaced"
    assert integrity.check() == "helpers.integrity_target.allclose was replaced"  # and again later


def test_a_deleted_function_is_found(watched) -> None:
    del watched.allclose
    assert integrity.check() == "helpers.integrity_target.allclose was deleted"


def test_a_replaced_method_is_found(watched) -> None:
    watched.Checker.verify = _from_a_cell()
    assert integrity.check() == "helpers.integrity_target.Checker.verify was replaced"


def test_an_added_method_is_found(watched) -> None:
    watched.Checker.__eq__ = _from_a_cell()
    assert integrity.check() == "helpers.integrity_target.Checker.__eq__ was added"


def test_a_library_rebinding_is_not_the_students(watched) -> None:
    watched.allclose = lambda a, b: a == b  # compiled from this file, not from a notebook cell
    assert integrity.check() == ""
    watched.allclose = _from_a_cell()  # a later change to the same namespace is still compared
    assert integrity.check() == "helpers.integrity_target.allclose was replaced"


def test_a_fork_takes_the_fingerprint_of_its_first_check(watched) -> None:
    """The kernel template fingerprints before forking; what changed before a kernel's first check is not a change."""
    for name in ("_modules", "_classes", "_hooks", "_compared"):
        getattr(integrity, name).clear()
    integrity.fingerprint_imported()  # in the template
    del watched.allclose  # the kernel's start-up, before the first check (as IPython removes builtins.exit)
    watched.Checker.verify = lambda self: True
    assert integrity.check() == ""  # the kernel's first check: the state it starts from
    watched.Checker.verify = _from_a_cell()
    watched.allclose = _from_a_cell()
    assert integrity.check() == "helpers.integrity_target.Checker.verify was replaced"
