"""Helper package for the course "Replicate computation and shard training state".

Modules:
    cluster   -- a warm local gloo process group you can drive from a notebook cell
    ledger    -- the record of every collective each rank issued, priced as a ring
    models    -- tiny deterministic models and batches
    costs     -- communication and memory calculators (reference answers)
    reference -- single-process float64 references that hidden tests compare against
    checks    -- student-facing self-checks with messages that teach
    plots     -- matplotlib figures of the chapters
    widgets   -- ipywidgets explorers
"""

COURSE_SEED = 1234
