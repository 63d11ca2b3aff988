# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: rank files and the marker written straight to their final names (a killed rank leaves a torn file)
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -45,5 +45,4 @@
 
 
 def _save_atomically(obj, path: str) -> None:
-    torch.save(obj, path + ".tmp")
-    os.replace(path + ".tmp", path)
+    torch.save(obj, path)
