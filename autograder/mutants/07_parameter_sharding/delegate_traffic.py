# assignment: 07_parameter_sharding
# grade_id: fsdp_traffic_bytes
# catches: delegating to the reference that helpers.param_sharding used to export (it is no longer there)
from helpers import param_sharding

fsdp_traffic_bytes = param_sharding.fsdp_traffic_bytes
