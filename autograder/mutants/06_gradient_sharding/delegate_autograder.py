# assignment: 06_gradient_sharding
# grade_id: owned_range
# catches: importing the instructor's reference from autograder.lessons.l06 (refused by the grader)
from autograder.lessons.l06 import owned_range
