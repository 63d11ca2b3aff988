# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: missing post-update sync: owners update, nobody broadcasts
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -34,9 +34,6 @@
                     step_size = self.lr / (1 - beta1 ** s["step"])
                     denom = (s["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** s["step"])).add_(self.eps)
                     p.addcdiv_(s["exp_avg"], denom, value=-step_size)
-            for p, owner in zip(self.params, self.owners):
-                if p.grad is not None:
-                    dist.broadcast(p, src=self.global_rank[owner], group=self.group)
 
     def zero_grad(self) -> None:
         """Set every parameter's .grad to None."""
