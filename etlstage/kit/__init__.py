"""The engine kit: what both engines use (worker programs and their pipes, statistics,
admission, services, dead-letter replays, progress); it imports neither engine."""
