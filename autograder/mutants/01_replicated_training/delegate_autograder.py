# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: importing the instructor's calculator from the autograder (refused by the grader; absent from a student copy)
--- source/01_replicated_training/01_replicated_training.ipynb ring_allreduce_bytes
+++ mutant
@@ -1,3 +1,6 @@
+from autograder.lessons.l01 import ring_allreduce_bytes as _reference
+
+
 def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
     """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
-    return 2 * (world_size - 1) / world_size * num_elements * bytes_per_element
+    return _reference(num_elements, bytes_per_element, world_size)
