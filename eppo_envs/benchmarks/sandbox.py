"""Sandbox throughput: runs per second for a named snippet with N parallel workers.

    from eppo_envs.benchmarks.sandbox import measure
    measure("trivial", workers=2, runs=100)   # {'snippet': 'trivial', 'workers': 2, 'runs': 100, 'runs_per_s': ...}

`python -m eppo_envs.benchmarks.sandbox` prints the table for the report (trivial and 100 ms, 1 and 2 workers).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

from eppo_envs.tools.sandbox import Sandbox, SandboxConfig

SNIPPETS: dict[str, str] = {
    "trivial": "print(1 + 1)",
    # 100 ms of CPU, not sleep: what a model's real computation costs the machine.
    "100ms": "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.1:\n    pass\nprint('done')",
    "numpy": "import numpy as np\nprint(np.linalg.det(np.eye(3)))",
    "sympy": "import sympy\nprint(sympy.solve('x**2 - 4'))",
}


def measure(snippet: str = "trivial", workers: int = 1, runs: int = 50, sandbox: Sandbox | None = None) -> dict:
    """Run `snippet` (a name from SNIPPETS, or code) `runs` times on `workers` threads; every run must succeed."""
    code = SNIPPETS.get(snippet, snippet)
    box = sandbox or Sandbox(SandboxConfig())
    box.run(code)  # warm the page cache so the first timed run is not an outlier
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda _: box.run(code), range(runs)))
    elapsed = time.perf_counter() - start
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)}/{runs} benchmark runs failed; first: {failed[0].summary()} {failed[0].stderr[-300:]}")
    return {
        "snippet": snippet if snippet in SNIPPETS else "custom",
        "workers": workers,
        "runs": runs,
        "seconds": round(elapsed, 3),
        "runs_per_s": round(runs / elapsed, 2),
        "mean_run_ms": round(1000 * sum(r.wall_s for r in results) / runs, 2),
        "backend": box.backend.name,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snippets", nargs="+", default=["trivial", "100ms"], help=f"any of {sorted(SNIPPETS)}")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args(argv)
    box = Sandbox()
    for name in args.snippets:
        for workers in args.workers:
            print(json.dumps(measure(name, workers=workers, runs=args.runs, sandbox=box)))


if __name__ == "__main__":
    main()
