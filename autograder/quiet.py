"""Keep the autograder's stdout for its results alone.

nbgrader, its kernel and the kernel's worker processes write logs and warnings straight
to file descriptors 1 and 2, which they inherit from this process. Around grading, both
are sent to a temporary file that is replayed on stderr only if grading crashes (a
``CourseError`` carries its own explanation, so its noise is dropped).
"""
from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from typing import Iterator, TextIO

from .course import CourseError


@contextmanager
def captured_output() -> Iterator[TextIO]:
    """Capture fds 1 and 2 for the block; yield a stream to the real stdout.

    If the block raises anything but a ``CourseError``, the captured text is written to
    the real stderr first.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            with os.fdopen(os.dup(saved_out), "w") as real_stdout:
                yield real_stdout
        except CourseError:
            raise
        except BaseException:
            sys.stdout.flush()
            sys.stderr.flush()
            log.seek(0)
            os.write(saved_err, log.read())
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
