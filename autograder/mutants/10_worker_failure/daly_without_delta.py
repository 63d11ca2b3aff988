# assignment: 10_worker_failure
# grade_id: intervals
# catches: Daly's interval without subtracting the checkpoint time (and no M cap for delta >= 2M)
--- source/10_worker_failure/10_worker_failure.ipynb intervals
+++ mutant
@@ -1,19 +1,17 @@
 def young_interval(checkpoint_s: float, node_mtbf_s: float, num_nodes: int) -> float:
-    """Young (1974): the interval (seconds of work) that minimises the first-order expected lost time."""
+    """Young (1974): sqrt(2 * delta * M) seconds, M the mean time between failures of the whole job."""
     return math.sqrt(2 * checkpoint_s * node_mtbf_s / num_nodes)
 
 
 def daly_interval(checkpoint_s: float, node_mtbf_s: float, num_nodes: int) -> float:
-    """Daly (2006): the higher-order estimate of the optimum interval (seconds of work)."""
+    """Daly (2006): the higher-order optimum interval in seconds (M if delta >= 2M)."""
     m = node_mtbf_s / num_nodes
-    if checkpoint_s >= 2 * m:
-        return m
     r = checkpoint_s / (2 * m)
-    return math.sqrt(2 * checkpoint_s * m) * (1 + math.sqrt(r) / 3 + r / 9) - checkpoint_s
+    return math.sqrt(2 * checkpoint_s * m) * (1 + math.sqrt(r) / 3 + r / 9)
 
 
 def expected_lost_time(run_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                        node_mtbf_s: float, num_nodes: int) -> float:
-    """Expected seconds lost over run_s seconds of work: checkpoint writes, replayed work and restarts."""
+    """Expected seconds lost over run_s of work: checkpoint writes + failures * (interval/2 + restart)."""
     job_mtbf = node_mtbf_s / num_nodes
     return run_s / interval_s * checkpoint_s + run_s / job_mtbf * (interval_s / 2 + restart_s)
