# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: delegating to the reference forward that helpers.prefetch used to export (it is no longer there)
from helpers import prefetch

prefetching_forward = prefetch.reference_forward
