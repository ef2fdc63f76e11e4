"""Reading results back: the scaling model and the reports (nothing here imports the engine)."""
