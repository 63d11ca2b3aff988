# assignment: 10_worker_failure
# grade_id: train_resumable
# catches: skips the checkpoint at num_steps itself (only steps before the end are committed)
--- source/10_worker_failure/10_worker_failure.ipynb train_resumable
+++ mutant
@@ -17,6 +17,6 @@
             grad.div_(world_size)
         optimizer.step()
         step += 1
-        if step % every == 0:
+        if step % every == 0 and step < num_steps:
             save_checkpoint(directory, step, model, optimizer, stream.state_dict())
     return step
