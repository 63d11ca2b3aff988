# assignment: 07_parameter_sharding
# grade_id: unit_parameters
# catches: a name-prefix test without the ".": unit "1" claims "10.weight"
--- source/07_parameter_sharding/07_parameter_sharding.ipynb unit_parameters
+++ mutant
@@ -5,6 +5,6 @@
         all_names.setdefault(id(param), []).append(name)
     owners = {u: [] for u in [*unit_names, ""]}
     for name, param in model.named_parameters():
-        holders = [u for u in unit_names if all(n.startswith(u + ".") for n in all_names[id(param)])]
+        holders = [u for u in unit_names if all(n.startswith(u) for n in all_names[id(param)])]
         owners[max(holders, key=len, default="")].append(name)   # the longest holder is the innermost
     return owners
