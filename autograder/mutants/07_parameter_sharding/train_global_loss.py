# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: returning the loss averaged over the ranks instead of this rank's local loss
--- source/07_parameter_sharding/07_parameter_sharding.ipynb train_full_shard
+++ mutant
@@ -10,5 +10,7 @@
             unit.reduce_gradients()
             unit.free()
         optimizer.step()
-        losses.append(loss.item())
+        mean = loss.detach().clone()
+        dist.all_reduce(mean)
+        losses.append(mean.item() / dist.get_world_size())
     return losses
