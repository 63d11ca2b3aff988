# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: one step on the first batch of a call only: a call given several batches must step on every one
--- source/07_parameter_sharding/07_parameter_sharding.ipynb train_full_shard
+++ mutant
@@ -1,14 +1,12 @@
 def train_full_shard(model: nn.Module, units: list, batches: list, lr: float) -> list[float]:
     """SGD over the units' shards, one FULL_SHARD step per batch; returns the local losses."""
     optimizer = torch.optim.SGD([u.shard for u in units], lr=lr)
-    losses = []
-    for x, y in batches:
-        optimizer.zero_grad()
-        loss = torch.nn.functional.mse_loss(model(x), y)
-        loss.backward()
-        for unit in units:
-            unit.reduce_gradients()
-            unit.free()
-        optimizer.step()
-        losses.append(loss.item())
-    return losses
+    x, y = batches[0]
+    optimizer.zero_grad()
+    loss = torch.nn.functional.mse_loss(model(x), y)
+    loss.backward()
+    for unit in units:
+        unit.reduce_gradients()
+        unit.free()
+    optimizer.step()
+    return [loss.item()]
