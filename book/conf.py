"""Sphinx configuration of the course book (build it with ``python book/build.py``).

The chapters are stored without outputs; MyST-NB executes each one once per build, in its own
directory (as JupyterLab and nbval do), and a cell that raises or runs longer than
``nb_execution_timeout`` seconds fails the build with the notebook's path and the cell.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parent
sys.path.insert(0, str(BOOK))  # lessons.py: the course's own Sphinx extension

project = "Replicate computation and shard training state"
author = ""  # no "By ..." and no copyright line in the footer
html_show_copyright = False

extensions = ["myst_nb", "lessons"]
root_doc = "index"
# The staged source (book/build.py) holds the home page and a link to notebooks/; only the
# chapters are pages, never the checkpoints or other notebooks that may lie beside them.
include_patterns = ["index.md", "notebooks/[0-9][0-9]_*.ipynb"]
exclude_patterns = ["**/.ipynb_checkpoints"]

# --- execution: the book build is the chapters' test ------------------------------------
nb_execution_mode = "force"          # chapters are stored without outputs: always execute
nb_execution_raise_on_error = True   # a failing cell fails the build (notebook and cell named)
nb_execution_show_tb = True
nb_execution_timeout = 300           # seconds per cell; a whole chapter ran in 6-15 s (idle 2 cores)
nb_execution_in_temp = False         # run in notebooks/, like JupyterLab and nbval
nb_merge_streams = True

# --- content ------------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
# Explorers are live ipywidgets: they need a kernel, so the book shows a note instead and
# loads no widget JavaScript from the network.
nb_ipywidgets_js: dict = {}

# MathJax 3 (the official distribution, from the django-static-mathjax package: data files
# only, no Django) copied into the site: the book reads offline and asks no CDN for anything.
mathjax_path = "mathjax/tex-chtml-full.js"
html_static_path = ["_static"]  # lessons.py adds _static/mathjax/

# --- the site -------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = project
html_favicon = "_static/favicon.svg"  # also spares the browser a /favicon.ico request that fails
templates_path = ["_templates"]
html_css_files = ["progress.css"]
html_js_files = ["progress.js"]
html_show_sourcelink = False
html_copy_source = False
# Without a default the theme logs a console error ("invalid theme mode") on a first visit.
html_context = {"default_mode": "auto"}
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
}

# Where "open in JupyterLab" links point: the server `make lab` starts (JupyterLab's default
# address). Another address with BOOK_LAB_URL=http://host:port/lab/tree/ at build time.
lab_url = os.environ.get("BOOK_LAB_URL", "http://localhost:8888/lab/tree/")
