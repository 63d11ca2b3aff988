# assignment: 08_prefetching
# grade_id: exposed_communication
# catches: delegating to the references that helpers.prefetch used to export (they are no longer there)
from helpers import prefetch

exposed_communication = prefetch.exposed_communication
blocked_waiting_s = prefetch.blocked_waiting_s
