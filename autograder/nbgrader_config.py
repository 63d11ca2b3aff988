"""nbgrader configuration of the course (loaded by the root ``nbgrader_config.py``).

The course directory is the repository root, computed from this file's location, so
plain ``nbgrader`` commands work from the root whatever the clone is called. The
autograder loads this same file and only swaps ``root`` and ``db_url`` for a throwaway
course directory, so instructors and ``python -m autograder`` grade identically.
"""
import os

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds, GetGrades,
                                    IgnorePattern, LimitOutput, OverwriteCells, OverwriteKernelspec, SaveAutoGrades)
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

from autograder.feedback import HideHiddenTests
from autograder.guard import GuardedExecute
from autograder.repair import RepairSubmission

c = get_config()  # noqa: F821  (injected by traitlets' config loader)

COURSE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

c.CourseDirectory.course_id = "shard-course"
c.CourseDirectory.root = COURSE_ROOT
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(COURSE_ROOT, "gradebook.db")
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints",
    "*.pyc",
    "__pycache__",
    "feedback",
    ".venv",
]

# Every cell of every assignment runs far below this; it only bounds a runaway cell.
c.Execute.timeout = 300
# Every grading kernel, and all it starts, runs in a bubblewrap sandbox (autograder/sandbox.py);
# without bubblewrap grading is refused. `python -m autograder grade` (self-study) sets
# "optional", the chapters under nbval "off" (autograder/warm_kernels.py explains the modes).
c.WarmKernelManager.sandbox = "required"
# One kernel everywhere: OverwriteKernelspec copies the source's kernelspec into each
# submission, and this pins the kernel that actually runs it.
c.Execute.kernel_name = "python3"

c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
c.ClearSolutions.code_stub = {
    "python": "# YOUR CODE HERE\nraise NotImplementedError()",
}
c.ClearHiddenTests.begin_test_delimeter = "BEGIN HIDDEN TESTS"
c.ClearHiddenTests.end_test_delimeter = "END HIDDEN TESTS"

# A deleted test cell is put back from the gradebook, so deleting a test gains nothing.
c.OverwriteCells.add_missing_cells = True

# nbgrader's sanitizing steps, after the submission's metadata and deleted locked cells are
# repaired (autograder/repair.py), so every grading path repairs the same way.
c.Autograde.sanitize_preprocessors = [RepairSubmission, ClearOutput, DeduplicateIds, OverwriteKernelspec,
                                      OverwriteCells, CheckCellMetadata]
# nbgrader's autograde pipeline with Execute replaced by the guarded one (autograder/guard.py):
# test cells run in the grader against the kernel's answers, never in the student's kernel.
c.Autograde.autograde_preprocessors = [GuardedExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
# Feedback shows every test's result and message, never the hidden tests' code.
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
