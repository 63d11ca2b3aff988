# assignment: 03_gradient_buckets
# grade_id: train_step
# catches: never waiting: the optimizer steps on each rank's own gradient
--- source/03_gradient_buckets/03_gradient_buckets.ipynb train_step
+++ mutant
@@ -1,9 +1,8 @@
 def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, grad_buckets, x: torch.Tensor,
                y: torch.Tensor) -> float:
     """One step: backward launches the buckets, wait() completes them, then the optimizer steps."""
-    optimizer.zero_grad()
+    optimizer.zero_grad(set_to_none=True)
     loss = torch.nn.functional.mse_loss(model(x), y)
     loss.backward()
-    grad_buckets.wait()
     optimizer.step()
     return loss.item()
