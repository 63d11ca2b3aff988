"""Plain `nbgrader ...` commands run from the repository root use the course config."""
import os

load_subconfig(os.path.join(os.path.dirname(os.path.abspath(__file__)), "autograder", "nbgrader_config.py"))  # noqa: F821
