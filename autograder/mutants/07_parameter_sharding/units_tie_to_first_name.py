# assignment: 07_parameter_sharding
# grade_id: unit_parameters
# catches: a tied weight placed by its first name only (split from its other use)
--- source/07_parameter_sharding/07_parameter_sharding.ipynb unit_parameters
+++ mutant
@@ -1,10 +1,13 @@
 def unit_parameters(model: nn.Module, unit_names: list[str]) -> dict[str, list[str]]:
     """Parameter names each unit shards; shared parameters go to the root ''."""
+    def unit_of(name):
+        return next((u for u in unit_names if name.startswith(u + ".")), "")
+
     all_names = {}
-    for name, param in model.named_parameters(remove_duplicate=False):
-        all_names.setdefault(id(param), []).append(name)
+    for name, p in model.named_parameters(remove_duplicate=False):
+        all_names.setdefault(id(p), []).append(name)
     owners = {u: [] for u in [*unit_names, ""]}
-    for name, param in model.named_parameters():
-        holders = [u for u in unit_names if all(n.startswith(u + ".") for n in all_names[id(param)])]
-        owners[max(holders, key=len, default="")].append(name)   # the longest holder is the innermost
+    for name, p in model.named_parameters():
+        units = {unit_of(name)}
+        owners[units.pop() if len(units) == 1 else ""].append(name)
     return owners
