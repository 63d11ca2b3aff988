# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: each rank resumes from the newest committed step in its own listing, with no collective: a rank whose listing lags resumes from another step
# caught_by: test_checkpoint_commit
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -24,11 +24,9 @@
     """Collective: restore the latest committed checkpoint; {"step", "cursor", "world_size"}, or None."""
     committed = [int(entry[len("step_"):]) for entry in os.listdir(directory)
                  if entry.startswith("step_") and os.path.exists(os.path.join(directory, entry, "COMMITTED"))]
-    latest = torch.tensor([max(committed, default=-1)])
-    dist.all_reduce(latest, op=dist.ReduceOp.MAX)  # a listing may lag: the newest step any rank sees
-    if latest.item() < 0:
+    if not committed:
         return None
-    path = os.path.join(directory, f"step_{latest.item():08d}")
+    path = os.path.join(directory, f"step_{max(committed):08d}")
     saved_world = torch.load(os.path.join(path, "COMMITTED"), weights_only=True)["world_size"]
     same = saved_world == dist.get_world_size()
     state = torch.load(os.path.join(path, f"rank_{dist.get_rank() if same else 0}.pt"), weights_only=True)
