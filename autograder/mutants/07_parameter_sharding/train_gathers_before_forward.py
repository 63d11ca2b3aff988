# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: gathering every unit before forward: the units gather themselves, so each step all-gathers once too often
--- source/07_parameter_sharding/07_parameter_sharding.ipynb train_full_shard
+++ mutant
@@ -4,6 +4,8 @@
     losses = []
     for x, y in batches:
         optimizer.zero_grad()
+        for unit in units:
+            unit.gather()
         loss = torch.nn.functional.mse_loss(model(x), y)
         loss.backward()
         for unit in units:
