"""Instructor side of each lesson: references, hidden-test drivers and hidden checks.

``lNN`` belongs to assignment ``NN``. Hidden tests import these modules
(``from autograder.lessons import l01 as ref``); the student copy of the course does not
contain them. A module may define ``STORED = {name: producer}``: ``python -m autograder
store`` writes each producer's JSON result to ``helpers/stored/<name>.json`` for chapters.
"""
