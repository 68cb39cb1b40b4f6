"""What Spark's Python processes run for a pipeline: its sources, transforms and sink, and
each stage's conversation with its worker processes (on the driver's host or an executor)."""
