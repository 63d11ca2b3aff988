# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: replacing parameter tensors (p.data = new tensor) instead of updating in place: earlier aliases and views go stale
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -33,10 +33,12 @@
                     s["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                     step_size = self.lr / (1 - beta1 ** s["step"])
                     denom = (s["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** s["step"])).add_(self.eps)
-                    p.addcdiv_(s["exp_avg"], denom, value=-step_size)
+                    p.data = p.data.addcdiv(s["exp_avg"], denom, value=-step_size)
             for p, owner in zip(self.params, self.owners):
                 if p.grad is not None:
-                    dist.broadcast(p, src=self.global_rank[owner], group=self.group)
+                    received = p.detach().clone()
+                    dist.broadcast(received, src=self.global_rank[owner], group=self.group)
+                    p.data = received
 
     def zero_grad(self) -> None:
         """Set every parameter's .grad to None."""
