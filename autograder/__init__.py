"""The course's grading machinery: nbgrader config, grading, mutants and the course check.

Command line: ``python -m autograder {release,grade,check} ...`` (see ``--help``).
"""
from .course import CourseError
from .grading import GradeResult, GradingError, grade_notebook

__all__ = ["CourseError", "GradeResult", "GradingError", "grade_notebook"]
