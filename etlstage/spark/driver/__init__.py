"""The Spark engine's driver: the ``etlstage run --engine spark`` process that lays the
pipeline out, builds and runs its one query, watches it and reports on it."""
