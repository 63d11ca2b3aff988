# assignment: 07_parameter_sharding
# grade_id: fsdp_traffic_bytes
# catches: always two all-gathers, even without resharding after forward
--- source/07_parameter_sharding/07_parameter_sharding.ipynb fsdp_traffic_bytes
+++ mutant
@@ -2,5 +2,5 @@
                        reshard_after_forward: bool = True) -> float:
     """Ring bytes one rank sends per FULL_SHARD (or SHARD_GRAD_OP) training step."""
     message = num_params * bytes_per_param
-    gathers = 2 if reshard_after_forward else 1
+    gathers = 2
     return (gathers + 1) * (world_size - 1) / world_size * message
