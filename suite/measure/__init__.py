"""Measurement: step and communication timing, calibration, gradient noise scale, FLOPs,
the hardware fingerprint and the collective microbenchmark."""
