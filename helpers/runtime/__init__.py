"""What runs the notebook's ranks: the cluster, a rank's loop, the ledger, faults, a slow network.

``cluster`` starts and drives a warm local gloo group from a notebook cell; ``worker`` is a rank's
loop; ``ledger`` records every collective a rank issues; ``faults`` kills, hangs or partitions
ranks; ``slow_network`` models a link's latency and bandwidth; ``remote`` serves the grader's calls
into the kernel.
"""
