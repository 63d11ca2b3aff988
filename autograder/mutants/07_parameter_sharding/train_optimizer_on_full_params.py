# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: optimizer built on the unsharded module parameters
--- source/07_parameter_sharding/07_parameter_sharding.ipynb train_full_shard
+++ mutant
@@ -1,9 +1,9 @@
 def train_full_shard(model: nn.Module, units: list, batches: list, lr: float) -> list[float]:
     """SGD over the units' shards, one FULL_SHARD step per batch; returns the local losses."""
-    optimizer = torch.optim.SGD([u.shard for u in units], lr=lr)
+    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
     losses = []
     for x, y in batches:
-        optimizer.zero_grad()
+        optimizer.zero_grad(set_to_none=True)
         loss = torch.nn.functional.mse_loss(model(x), y)
         loss.backward()
         for unit in units:
