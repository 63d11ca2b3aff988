"""Helper package for the course "Replicate computation and shard training state".

Modules:
    cluster -- a warm local gloo process group you can drive from a notebook cell
    models  -- tiny deterministic models
    costs   -- communication and memory calculators (reference answers)
"""

COURSE_SEED = 1234
