"""The course's grading machinery: nbgrader config, grading, mutants and the course check.

Command line: ``python -m autograder {release,grade,check,store,student-copy} ...`` (see
``--help``). Nothing is imported here: hidden tests import ``autograder.lessons.lNN`` in the
grading kernel, and that must not pay for nbgrader and nbformat.
"""
