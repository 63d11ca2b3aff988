# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: delegating to the reference loop that helpers.param_sharding used to export (it is no longer there)
from helpers import param_sharding

train_full_shard = param_sharding.reference_train
