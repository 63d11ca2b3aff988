# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# catches: waiting only on the last handle (finishing a later all-reduce does not finish an earlier one)
--- source/03_gradient_buckets/03_gradient_buckets.ipynb GradBuckets
+++ mutant
@@ -1,8 +1,5 @@
 class GradBuckets:
-    """Averages the gradients of `model` over `group` with all-reduces that travel during backward.
-
-    Add any methods and attributes you need.
-    """
+    """Averages the gradients of `model` over `group` with asynchronous all-reduces launched during backward."""
 
     def __init__(self, model: nn.Module, group=None) -> None:
         self.params = list(model.parameters())
@@ -19,24 +16,21 @@
         if current:
             self.buckets.append(current)
         self.ready, self.launched = set(), []
+        for i, p in enumerate(self.params):
+            p.register_post_accumulate_grad_hook(lambda p, i=i: self.grad_ready(i))
 
-        def grad_ready(index: int) -> None:
-            """Launch, in bucket order (the same on every rank), every bucket now complete."""
-            self.ready.add(index)
-            while len(self.launched) < len(self.buckets) and self.ready.issuperset(self.buckets[len(self.launched)]):
-                bucket = self.buckets[len(self.launched)]
-                buffer = torch.cat([self.params[i].grad.reshape(-1) for i in bucket])
-                handle = dist.all_reduce(buffer, group=self.group, async_op=True)
-                self.launched.append((handle, buffer))
-
-        for i, p in enumerate(self.params):
-            p.register_post_accumulate_grad_hook(lambda p, i=i: grad_ready(i))
+    def grad_ready(self, index: int) -> None:
+        self.ready.add(index)
+        while len(self.launched) < len(self.buckets) and self.ready.issuperset(self.buckets[len(self.launched)]):
+            bucket = self.buckets[len(self.launched)]
+            buffer = torch.cat([self.params[i].grad.reshape(-1) for i in bucket])
+            handle = dist.all_reduce(buffer, group=self.group, async_op=True)
+            self.launched.append((handle, buffer))
 
     def wait(self) -> None:
-        """Return once every `.grad` holds the mean over the group's ranks."""
         world_size = dist.get_world_size(self.group)
+        self.launched[-1][0].wait()
         for bucket, (handle, buffer) in zip(self.buckets, self.launched):
-            handle.wait()
             offset = 0
             for i in bucket:
                 grad = self.params[i].grad
