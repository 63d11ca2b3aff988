# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: delegating to the reference unit that helpers.param_sharding used to export (it is no longer there)
from helpers import param_sharding

FullyShardedUnit = param_sharding.ReferenceShardedUnit
