# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: state_bytes() computed from the partition (8 x owned elements) instead of the state held: counts owned parameters that never had a gradient
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -45,7 +45,7 @@
 
     def state_bytes(self) -> int:
         """Bytes of this rank's optimizer state: exp_avg + exp_avg_sq of the parameters it owns."""
-        return sum(s["exp_avg"].nbytes + s["exp_avg_sq"].nbytes for s in self.state.values())
+        return 8 * sum(p.numel() for p, o in zip(self.params, self.owners) if o == self.rank)
 
     def consolidated_state_dict(self) -> dict | None:
         """On group rank 0: a torch.optim.Adam-style state dict of all parameters; None elsewhere."""
