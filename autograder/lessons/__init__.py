"""Instructor side of each lesson: one package ``lNN`` per lesson, split by job.

``lNN`` belongs to assignment ``NN`` (:data:`helpers.lessons.LESSONS`). Hidden tests import the
package (``from autograder.lessons import l01 as ref``) and call its ``check_*``; the student
copy of the course does not contain it. Each package has

* ``drivers.py``: what grading may send into the student's kernel (drivers, stand-ins, hidden
  models), declared in its ``KERNEL_SIDE``; never a reference or an expected value;
* ``verdicts.py``: the references and the ``check_*`` verdicts, which stay in the grader;
* ``stored.py``: the producers of the chapter's stored data, ``STORED = {name: producer}``
  (``python -m autograder store`` writes each result to ``helpers/stored/<name>.json``).

``costs.py`` holds the closed-form costs several lessons' references use.
"""
