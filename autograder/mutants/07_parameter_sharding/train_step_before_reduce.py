# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: stepping before the gradients are reduce-scattered into the shards
--- source/07_parameter_sharding/07_parameter_sharding.ipynb train_full_shard
+++ mutant
@@ -3,12 +3,12 @@
     optimizer = torch.optim.SGD([u.shard for u in units], lr=lr)
     losses = []
     for x, y in batches:
-        optimizer.zero_grad()
+        optimizer.zero_grad(set_to_none=True)
         loss = torch.nn.functional.mse_loss(model(x), y)
         loss.backward()
+        optimizer.step()
         for unit in units:
             unit.reduce_gradients()
             unit.free()
-        optimizer.step()
         losses.append(loss.item())
     return losses
