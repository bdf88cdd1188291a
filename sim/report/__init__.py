"""What a run's results say: latency and throughput metrics, the saturation verdict,
SLO targets, requests.csv and summary.json, the printed table and the plots (and, for
a staged workload, the per-stage block and latency over time).

Reads a :class:`~sim.core.result.RunResult`; may import everything below it (core,
config, policies, cost, workload), never the studies, validation or the CLI.
"""
