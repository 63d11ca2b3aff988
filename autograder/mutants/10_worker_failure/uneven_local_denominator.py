# assignment: 10_worker_failure
# grade_id: train_uneven
# catches: each rank divides by its own element count (a mean of per-rank means, not the global mean)
--- source/10_worker_failure/10_worker_failure.ipynb train_uneven
+++ mutant
@@ -12,11 +12,12 @@
             x, y = batches[steps]
             nn.functional.mse_loss(model(x), y, reduction="sum").backward()
             count += y.numel()
+        local = count.clamp(min=1)
         dist.all_reduce(count)
         for weight in model.parameters():
             if weight.grad is None:  # this rank had no batch
                 weight.grad = torch.zeros_like(weight)
             dist.all_reduce(weight.grad)
-            weight.grad.div_(count)
+            weight.grad.div_(local * dist.get_world_size())
         optimizer.step()
         steps += 1
