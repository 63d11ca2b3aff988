# assignment: 04_accumulation
# grade_id: window_allreduce_cost
# catches: importing the instructor's reference (the grader refuses a cell that imports autograder)
from autograder.lessons.l04 import window_allreduce_cost
