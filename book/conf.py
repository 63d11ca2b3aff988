"""Sphinx configuration of the course book (build it with ``python book/build.py``).

The chapters are stored without outputs (but for the cells whose output nbval compares). Their
outputs come from MyST-NB's execution cache (jupyter-cache), which nbval's run of the chapters
fills (``book/nbval_book.py``; ``book/build.py`` runs the chapters the cache lacks first).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parent
sys.path.insert(0, str(BOOK))  # lessons.py: the course's own Sphinx extension; nbval_book.py
sys.path.insert(1, str(BOOK.parent))  # helpers.lessons, the registry lessons.py reads
from nbval_book import cache_dir  # noqa: E402

project = "Replicate computation and shard training state"
author = ""  # no "By ..." and no copyright line in the footer
html_show_copyright = False

extensions = ["myst_nb", "lessons"]
root_doc = "index"
# The staged source (book/build.py) links the home page and the chapters (in notebooks/).
include_patterns = ["index.md", "notebooks/[0-9][0-9]_*.ipynb"]
exclude_patterns = ["**/.ipynb_checkpoints"]

# Outputs from the jupyter-cache folder of the current helpers/ (book/build.py passes the one it
# filled). A chapter found there is not run again; one that is not would be run by MyST-NB itself,
# which book/build.py never lets happen: it runs such chapters under nbval first.
nb_execution_mode = "cache"
nb_execution_cache_path = str(cache_dir())
nb_execution_raise_on_error = True
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
