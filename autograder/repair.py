"""nbgrader preprocessor: give a damaged submission its cells' metadata and locked cells back.

Run first among ``Autograde.sanitize_preprocessors`` (``autograder/nbgrader_config.py``), so
every grading path (``nbgrader autograde``, the formgrader, ``grade-class``,
``python -m autograder grade``, the course check) repairs a submission the same way before
nbgrader's own ``OverwriteCells`` restores the locked cells' contents:
:func:`autograder.grading.check_structure` refuses duplicate grade_ids and changed cell types,
:func:`autograder.grading.repair_metadata` puts back renamed grade_ids and changed flags, and
:func:`autograder.grading.restore_locked_cells` re-inserts deleted locked cells.
"""
from __future__ import annotations

import os

import nbformat
from nbformat import NotebookNode
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

from .grading import check_structure, repair_metadata, restore_locked_cells


class RepairSubmission(NbGraderPreprocessor):
    """Repair a submission against its assignment's release and source notebooks (notes are logged)."""

    def _notebook(self, directory: str, resources: dict) -> NotebookNode:
        coursedir = CourseDirectory(config=self.config)
        info = resources["nbgrader"]
        path = os.path.join(coursedir.root, directory, info["assignment"], f"{info['notebook']}.ipynb")
        return nbformat.read(path, as_version=4)

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        coursedir = CourseDirectory(config=self.config)
        release = self._notebook(coursedir.release_directory, resources)
        source = self._notebook(coursedir.source_directory, resources)
        check_structure(nb, release)
        repaired, notes = repair_metadata(nb, release)
        repaired, restored = restore_locked_cells(repaired, release, source)
        for note in notes + restored:
            self.log.warning("%s: %s", resources["nbgrader"].get("student", "submission"), note)
        return repaired, resources
