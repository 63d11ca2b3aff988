# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# catches: delegating to the course's old reference class helpers.buckets.ReferenceGradBuckets
from helpers.buckets import ReferenceGradBuckets as GradBuckets
