# assignment: 07_parameter_sharding
# grade_id: unit_parameters
# catches: delegating to the reference that helpers.param_sharding used to export (it is no longer there)
from helpers.param_sharding import unit_parameters
