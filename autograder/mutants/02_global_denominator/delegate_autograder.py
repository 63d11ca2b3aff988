# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: importing the instructor's reference (the grader refuses a cell that imports autograder)
from autograder.lessons.l02 import mean_of_means_factors
