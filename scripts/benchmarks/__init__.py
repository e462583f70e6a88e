"""memfs benchmark harness (issue 7): memfs next to the native disk, rclone and the
reference worker (the `anthropic` SDK's memory sync engine), side by side in one run.

Run it through `scripts/bench` (which installs the extras). Every figure that matters
is a ratio measured in the same run; each case is repeated and reported as the median
with its spread (min-max). Writes `bench-out/results.json` and `docs/performance.md`.

  cases.py      the six built-in cases of issue 7 (per-operation, agent workload,
                readiness, idle sync, flush, memory)
  readonly.py   case 2c: the read commands on default and --read-only mounts (zero-message
                opens) next to --open-requests
  workloads.py  what the engines are made to do: trees, the agent script, the loops
  engines.py    memfs (the test suite's tests/support helpers), rclone, the reference
                worker (refworker.py is its process)
  proxy.py      the counting HTTP proxy in front of `memfs serve`
  report.py     results -> docs/performance.md
  sections.py   the plug-in interface: extra sections as standalone modules here
  __main__.py   flags and the run

Only 127.0.0.1 networking; every wait is bounded. Not part of the `memfs` package.
"""
