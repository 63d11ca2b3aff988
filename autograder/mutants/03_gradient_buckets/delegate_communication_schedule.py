# assignment: 03_gradient_buckets
# grade_id: communication_schedule
# catches: delegating to the course's old reference helpers.buckets.communication_schedule
from helpers.buckets import communication_schedule
