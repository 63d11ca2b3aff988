# assignment: 07_parameter_sharding
# grade_id: full_shard_schedule
# catches: importing the instructor's reference (the grader refuses the cell)
from autograder.lessons.l07 import full_shard_schedule
