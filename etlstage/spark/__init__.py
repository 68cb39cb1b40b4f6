"""The Spark engine: the same pipeline file and workers as one Spark Structured Streaming query."""
