# assignment: 03_gradient_buckets
# grade_id: communication_tail
# catches: delegating to the course's old reference helpers.buckets.communication_tail
from helpers.buckets import communication_tail
