"""Results on disk and how to read them: ``dpsuite.results.load("results/...")`` and friends.

Names, units, types, ranges and meanings of every key and column: ``dpsuite.results.schema``.
"""

from dpsuite.results import schema
from dpsuite.results.load import (
    epochs_of,
    find_runs,
    flatten,
    load,
    load_comm_bench,
    load_epochs,
    load_input_bench,
    load_steps,
    steps_of,
)
from dpsuite.results.run_csvs import read_csv_checked
from dpsuite.results.store import (
    ATTEMPTS_DIR,
    COMM_BENCH_COLUMNS,
    COMM_BENCH_CSV,
    COMM_BENCH_JSON,
    EPOCH_COLUMNS,
    INPUT_BENCH_CSV,
    INPUT_BENCH_JSON,
    SCHEMA_VERSION,
    SCRATCH_DIR,
    STATUSES,
    STEP_COLUMNS,
    RunWriter,
    append_csv,
    config_hash,
    effective_status,
    make_run_id,
    now_iso,
    read_json,
    read_status,
    run_identity,
    write_comm_bench,
    write_input_bench,
    write_json_atomic,
)

OPTIONAL_EPOCH_COLUMNS = list(schema.OPTIONAL_EPOCH_COLUMNS)

__all__ = [
    "ATTEMPTS_DIR",
    "COMM_BENCH_COLUMNS",
    "COMM_BENCH_CSV",
    "COMM_BENCH_JSON",
    "EPOCH_COLUMNS",
    "INPUT_BENCH_CSV",
    "INPUT_BENCH_JSON",
    "OPTIONAL_EPOCH_COLUMNS",
    "SCHEMA_VERSION",
    "SCRATCH_DIR",
    "STATUSES",
    "STEP_COLUMNS",
    "RunWriter",
    "append_csv",
    "config_hash",
    "effective_status",
    "epochs_of",
    "find_runs",
    "flatten",
    "load",
    "load_comm_bench",
    "load_epochs",
    "load_input_bench",
    "load_steps",
    "make_run_id",
    "now_iso",
    "read_csv_checked",
    "read_json",
    "read_status",
    "run_identity",
    "schema",
    "steps_of",
    "write_comm_bench",
    "write_input_bench",
    "write_json_atomic",
]
