# assignment: 10_worker_failure
# grade_id: train_uneven
# catches: a rank that runs out of data stops calling collectives (its peers hang: a bounded CollectiveTimeout)
--- source/10_worker_failure/10_worker_failure.ipynb train_uneven
+++ mutant
@@ -2,9 +2,7 @@
     """Train while any rank has a batch; never leave a collective to the others alone."""
     steps = 0
     while True:
-        has_data = torch.tensor([1 if steps < len(batches) else 0])
-        dist.all_reduce(has_data)
-        if has_data.item() == 0:
+        if steps == len(batches):
             return steps
         optimizer.zero_grad()
         count = torch.zeros(1, dtype=torch.float64)
