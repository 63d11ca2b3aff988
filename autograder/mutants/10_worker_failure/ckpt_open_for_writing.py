# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: writes its files through open(..., 'wb') instead of torch.save(obj, path), against the rule that lists the calls a crash test can interrupt
# caught_by: test_checkpoint_crashes
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -45,5 +45,6 @@
 
 
 def _save_atomically(obj, path: str) -> None:
-    torch.save(obj, path + ".tmp")
+    with open(path + ".tmp", "wb") as f:
+        torch.save(obj, f)
     os.replace(path + ".tmp", path)
