# assignment: 08_prefetching
# grade_id: max_prefetch_depth
# catches: delegating to the reference that helpers.prefetch used to export (it is no longer there)
from helpers.prefetch import max_prefetch_depth
