"""What every layer may ask of the process it runs in: its ranks and process group, the host's
cores and devices, and whether a results directory can be written."""
