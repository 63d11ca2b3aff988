"""Helper package for the course "Replicate computation and shard training state".

Three parts, and the registry of lessons:

``helpers.lessons``
    :data:`~helpers.lessons.LESSONS`: number, slug and title of every lesson; the names of its files.
``helpers.runtime`` -- what runs the notebook's ranks
    ``cluster`` (a warm local gloo process group driven from a notebook cell), ``worker`` (a
    rank's loop), ``ledger`` (every collective a rank issued, priced as a ring), ``faults``
    (killed, hung and partitioned ranks), ``slow_network`` (a modelled link), ``remote`` (calls
    from the grader into the kernel). ``helpers.launch`` runs a lesson's script under torchrun.
``helpers.shared`` -- what every lesson uses
    ``models``, ``data``, ``state`` (initialisation, batches, state utilities), ``checks``
    (comparisons whose messages teach), ``plots`` (figure style), ``stored`` (results stored
    with the course in ``helpers/stored/NN_name.json``).
``helpers.lNN_slug`` -- one package per lesson, named by its number and slug
    the lesson's code (in the package itself), its figures and explorers (``.plots``, where the
    chapter has figures of its own) and its torchrun script (``.launch``).
"""

COURSE_SEED = 1234
