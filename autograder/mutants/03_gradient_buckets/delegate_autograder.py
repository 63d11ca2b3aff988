# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: importing the instructor's reference from autograder.lessons.l03 (refused by the grader)
from autograder.lessons.l03 import assign_buckets
