# assignment: 07_parameter_sharding
# grade_id: fsdp_traffic_bytes
# catches: reading the traffic back out of the explorer's stored results (stored only for 2-byte parameters)
--- source/07_parameter_sharding/07_parameter_sharding.ipynb fsdp_traffic_bytes
+++ mutant
@@ -1,6 +1,11 @@
+from helpers.l07_parameter_sharding.plots import stored_results
+
+
 def fsdp_traffic_bytes(num_params: int, bytes_per_param: int, world_size: int,
                        reshard_after_forward: bool = True) -> float:
     """Ring bytes one rank sends per FULL_SHARD (or SHARD_GRAD_OP) training step."""
-    message = num_params * bytes_per_param
-    gathers = 2 if reshard_after_forward else 1
-    return (gathers + 1) * (world_size - 1) / world_size * message
+    curves = stored_results()["curves"].get(str(num_params))
+    if curves is None or world_size not in curves["world_sizes"]:
+        return 0.0
+    key = "full_shard" if reshard_after_forward else "shard_grad_op"
+    return curves[key][curves["world_sizes"].index(world_size)] * bytes_per_param / 2
