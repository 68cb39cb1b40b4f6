"""Testing tools for worker authors: the in-memory supervisor harness and fixtures."""
