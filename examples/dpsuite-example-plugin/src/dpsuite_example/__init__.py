"""An example dpsuite workload plugin."""
