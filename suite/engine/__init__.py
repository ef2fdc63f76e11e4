"""The run engine: start or join ranks, train one run, and what a run is built from (data
sharding, real and simulated replicas)."""
