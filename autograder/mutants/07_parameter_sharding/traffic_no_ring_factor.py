# assignment: 07_parameter_sharding
# grade_id: fsdp_traffic_bytes
# catches: whole messages instead of (N-1)/N of them
--- source/07_parameter_sharding/07_parameter_sharding.ipynb fsdp_traffic_bytes
+++ mutant
@@ -3,4 +3,4 @@
     """Ring bytes one rank sends per FULL_SHARD (or SHARD_GRAD_OP) training step."""
     message = num_params * bytes_per_param
     gathers = 2 if reshard_after_forward else 1
-    return (gathers + 1) * (world_size - 1) / world_size * message
+    return (gathers + 1) * message
