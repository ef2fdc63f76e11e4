"""How a step updates the model: the learning-rate rules and schedules, the LARS optimizer, and
numeric precision."""
