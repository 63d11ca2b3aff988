# assignment: 08_prefetching
# grade_id: prefetch_schedule
# catches: importing the instructor's reference (the grader refuses the cell)
from autograder.lessons.l08 import prefetch_schedule
