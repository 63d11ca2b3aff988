# assignment: 10_worker_failure
# grade_id: train_resumable
# catches: after a membership change the gradient is still divided by the world size that wrote the checkpoint
--- source/10_worker_failure/10_worker_failure.ipynb train_resumable
+++ mutant
@@ -14,7 +14,7 @@
         grads = [p.grad for p in model.parameters()]
         for grad in grads:
             dist.all_reduce(grad)
-            grad.div_(world_size)
+            grad.div_(world_size if meta is None else meta["world_size"])
         optimizer.step()
         step += 1
         if step % every == 0:
