from tests.support.kafka import broker, spawn, topic  # noqa: F401  (fixtures)
