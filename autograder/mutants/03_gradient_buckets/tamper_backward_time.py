# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# caught_by: test_grad_buckets_overlap
# catches: tampering with the measurement: the model's modelled backward times are changed so that communication looks hidden
--- source/03_gradient_buckets/03_gradient_buckets.ipynb GradBuckets
+++ mutant
@@ -1,10 +1,10 @@
 class GradBuckets:
-    """Averages the gradients of `model` over `group` with all-reduces that travel during backward.
-
-    Add any methods and attributes you need.
-    """
+    """Averages the gradients of `model` over `group` with asynchronous all-reduces launched during backward."""
 
     def __init__(self, model: nn.Module, group=None) -> None:
+        for module in model.modules():
+            if hasattr(module, "seconds"):
+                module.seconds = 1.0
         self.params = list(model.parameters())
         self.group = group
         sizes = [p.numel() * p.element_size() for p in self.params]
@@ -19,21 +19,18 @@
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
         for bucket, (handle, buffer) in zip(self.buckets, self.launched):
             handle.wait()
