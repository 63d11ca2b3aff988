# assignment: 08_prefetching
# grade_id: peak_live_bytes
# catches: delegating to the reference that helpers.prefetch used to export (it is no longer there)
from helpers.prefetch import peak_live_bytes
