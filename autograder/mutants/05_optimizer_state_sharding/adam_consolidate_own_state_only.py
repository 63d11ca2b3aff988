# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: consolidated_state_dict returns only rank 0's own shard of the state
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -57,7 +57,7 @@
         dist.gather_object(local, gathered, dst=self.global_rank[0], group=self.group)
         if self.rank != 0:
             return None
-        state = {i: s for part in gathered for i, s in part.items()}
+        state = local
         return {"state": dict(sorted(state.items())),
                 "param_groups": [{"lr": self.lr, "betas": self.betas, "eps": self.eps,
                                   "weight_decay": self.weight_decay, "params": list(range(len(self.params)))}]}
