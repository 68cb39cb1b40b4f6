"""pytest plugin (entry point ``pytest11``): fixtures for testing etlstage workers."""
