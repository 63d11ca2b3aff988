"""Helper package for the course "Replicate computation and shard training state".

Modules:
    cluster   -- a warm local gloo process group you can drive from a notebook cell
    ledger    -- the record of every collective each rank issued, priced as a ring
    models    -- tiny deterministic models and batches
    reference -- model factories (same or per-rank initialisation) and batches shared by the lessons
    stored    -- results stored with the course for chapter figures (written by the instructor side)
    checks    -- student-facing self-checks with messages that teach
    plots     -- matplotlib figures of the chapters
    widgets   -- ipywidgets explorers
"""

COURSE_SEED = 1234
