# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: one optimizer step after the loop instead of one per batch
--- source/07_parameter_sharding/07_parameter_sharding.ipynb train_full_shard
+++ mutant
@@ -9,6 +9,6 @@
         for unit in units:
             unit.reduce_gradients()
             unit.free()
-        optimizer.step()
         losses.append(loss.item())
+    optimizer.step()
     return losses
