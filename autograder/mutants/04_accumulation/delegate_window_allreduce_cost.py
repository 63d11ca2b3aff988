# assignment: 04_accumulation
# grade_id: window_allreduce_cost
# catches: delegating to the calculator helpers.accumulation used to export (no longer on the student side)
from helpers.accumulation import window_allreduce_cost
