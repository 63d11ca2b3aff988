# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: a trainable parameter without a gradient in this step stepped with a zero gradient (Adam skips it)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -18,8 +18,10 @@
         beta1, beta2 = self.betas
         with torch.no_grad():
             for p, owner in zip(self.params, self.owners):
+                if not p.requires_grad:
+                    continue
                 if p.grad is None:
-                    continue
+                    p.grad = torch.zeros_like(p)
                 dist.all_reduce(p.grad, group=self.group)
                 grad = p.grad.div_(self.world_size)
                 if owner == self.rank:
