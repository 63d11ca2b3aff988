# assignment: 03_gradient_buckets
# grade_id: train_step
# catches: clearing the gradients after they were averaged instead of before backward
--- source/03_gradient_buckets/03_gradient_buckets.ipynb train_step
+++ mutant
@@ -1,9 +1,9 @@
 def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, grad_buckets, x: torch.Tensor,
                y: torch.Tensor) -> float:
     """One step: backward launches the buckets, wait() completes them, then the optimizer steps."""
-    optimizer.zero_grad()
     loss = torch.nn.functional.mse_loss(model(x), y)
     loss.backward()
     grad_buckets.wait()
+    optimizer.zero_grad(set_to_none=False)
     optimizer.step()
     return loss.item()
