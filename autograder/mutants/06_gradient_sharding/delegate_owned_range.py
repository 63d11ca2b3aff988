# assignment: 06_gradient_sharding
# grade_id: owned_range
# catches: delegating to the course's old reference helpers.grad_sharding.owned_range (no longer in the student copy)
from helpers.grad_sharding import owned_range
