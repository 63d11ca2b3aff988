"""Benchmark: starting the kernel template and a first kernel, in the bubblewrap sandbox and without it.

    python benchmarks/sandbox_start.py [ROUNDS]

Each round, in a fresh process per mode (modes alternate, so both see the same load):
the seconds to start the template (torch, ipykernel and the lesson modules imported, its
forkserver started), then to start a first kernel from it in a folder holding one notebook
and get its answer to ``1 + 1``, then a second kernel. Prints one table row per mode: the
median of the rounds.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys

ONE = """
import json, shutil, sys, tempfile, time
from jupyter_client.utils import run_sync
from autograder.processes import become_subreaper
from autograder.warm_kernels import WarmKernelManager, start_template
from traitlets.config import Config

mode = sys.argv[1]
folder = tempfile.mkdtemp()  # a submission folder: one notebook
open(f"{folder}/submission.ipynb", "w").write("{}")
become_subreaper()
start = time.perf_counter()
start_template(mode)
times = {"template": time.perf_counter() - start}
for label in ("first kernel", "second kernel"):
    start = time.perf_counter()
    km = WarmKernelManager(kernel_name="python3", config=Config({"WarmKernelManager": {"sandbox": mode}}))
    run_sync(km.start_kernel)(cwd=folder)
    kc = km.client()
    kc.start_channels()
    run_sync(kc.wait_for_ready)(timeout=120)
    run_sync(kc.execute_interactive)("1 + 1", timeout=60, output_hook=lambda msg: None)
    times[label] = time.perf_counter() - start
    kc.stop_channels()
    run_sync(km.shutdown_kernel)()
shutil.rmtree(folder)
print(json.dumps(times))
"""


def round_seconds(mode: str) -> dict[str, float]:
    """One fresh process's seconds for the template and two kernels in ``mode``."""
    done = subprocess.run([sys.executable, "-c", ONE, mode], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(rounds: int = 3) -> None:
    results: dict[str, list[dict[str, float]]] = {"required": [], "off": []}
    for _ in range(rounds):
        for mode in results:
            results[mode].append(round_seconds(mode))
    print("| mode | template (s) | first kernel (s) | second kernel (s) |\n|---|---|---|---|")
    for mode, runs in results.items():
        cells = [statistics.median(run[key] for run in runs) for key in ("template", "first kernel", "second kernel")]
        label = "sandboxed" if mode == "required" else "no sandbox"
        print(f"| {label} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
