# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: every rank allocates exp_avg/exp_avg_sq for every parameter (no saving), updates only its own
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -22,9 +22,9 @@
                     continue
                 dist.all_reduce(p.grad, group=self.group)
                 grad = p.grad.div_(self.world_size)
+                if p not in self.state:
+                    self.state[p] = {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                 if owner == self.rank:
-                    if p not in self.state:
-                        self.state[p] = {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                     s = self.state[p]
                     s["step"] += 1
                     if self.weight_decay != 0:
@@ -52,7 +52,7 @@
         local = {i: {"step": torch.tensor(float(self.state[p]["step"])),
                      "exp_avg": self.state[p]["exp_avg"].clone(),
                      "exp_avg_sq": self.state[p]["exp_avg_sq"].clone()}
-                 for i, p in enumerate(self.params) if p in self.state}
+                 for i, p in enumerate(self.params) if p in self.state and self.owners[i] == self.rank}
         gathered = [None] * self.world_size if self.rank == 0 else None
         dist.gather_object(local, gathered, dst=self.global_rank[0], group=self.group)
         if self.rank != 0:
