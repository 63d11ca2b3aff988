# assignment: 08_prefetching
# grade_id: prefetch_schedule
# catches: delegating to the reference that helpers.prefetch used to export (it is no longer there)
from helpers.prefetch import prefetch_schedule
