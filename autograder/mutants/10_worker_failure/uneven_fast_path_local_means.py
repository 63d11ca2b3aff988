# assignment: 10_worker_failure
# grade_id: train_uneven
# catches: when every rank has data, averages the ranks' own mean losses (wrong for batches of different sizes)
--- source/10_worker_failure/10_worker_failure.ipynb train_uneven
+++ mutant
@@ -7,6 +7,15 @@
         if has_data.item() == 0:
             return steps
         optimizer.zero_grad()
+        if has_data.item() == dist.get_world_size():  # every rank has a batch: average the ranks' means
+            x, y = batches[steps]
+            nn.functional.mse_loss(model(x), y).backward()
+            for weight in model.parameters():
+                dist.all_reduce(weight.grad)
+                weight.grad.div_(dist.get_world_size())
+            optimizer.step()
+            steps += 1
+            continue
         count = torch.zeros(1, dtype=torch.float64)
         if steps < len(batches):
             x, y = batches[steps]
