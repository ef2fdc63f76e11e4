"""Results in other tools' formats: Parquet files, TensorBoard event files, W&B offline runs.

Every exporter reads a results tree (run.json, epochs.csv, steps.csv, comm-bench results) and
nothing else: exporting never runs inside, or slows, a measurement.
"""
