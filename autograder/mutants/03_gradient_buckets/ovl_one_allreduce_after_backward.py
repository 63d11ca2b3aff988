# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# caught_by: test_grad_buckets_overlap
# catches: the hard part skipped: one all-reduce of the whole flat gradient in wait(), after backward (correct, nothing overlaps)
--- source/03_gradient_buckets/03_gradient_buckets.ipynb GradBuckets
+++ mutant
@@ -1,45 +1,15 @@
 class GradBuckets:
-    """Averages the gradients of `model` over `group` with all-reduces that travel during backward.
-
-    Add any methods and attributes you need.
-    """
+    """Averages the gradients of `model` over `group` with one all-reduce after backward."""
 
     def __init__(self, model: nn.Module, group=None) -> None:
         self.params = list(model.parameters())
         self.group = group
-        sizes = [p.numel() * p.element_size() for p in self.params]
-        cap = sum(sizes) / 4                      # about four messages: few latencies, a small last one
-        self.buckets, current, size = [], [], 0
-        for i in reversed(range(len(self.params))):   # backward runs the last layers first
-            current.append(i)
-            size += sizes[i]
-            if size >= cap:
-                self.buckets.append(current)
-                current, size = [], 0
-        if current:
-            self.buckets.append(current)
-        self.ready, self.launched = set(), []
-
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
 
     def wait(self) -> None:
-        """Return once every `.grad` holds the mean over the group's ranks."""
-        world_size = dist.get_world_size(self.group)
-        for bucket, (handle, buffer) in zip(self.buckets, self.launched):
-            handle.wait()
-            offset = 0
-            for i in bucket:
-                grad = self.params[i].grad
-                grad.copy_(buffer[offset:offset + grad.numel()].view_as(grad) / world_size)
-                offset += grad.numel()
-        self.ready, self.launched = set(), []
+        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
+        dist.all_reduce(flat, group=self.group)
+        flat /= dist.get_world_size(self.group)
+        offset = 0
+        for p in self.params:
+            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
+            offset += p.numel()
