# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: delegating to the course's old reference helpers.buckets.assign_buckets (no longer in the student copy)
from helpers.buckets import assign_buckets
