from tests.support.kafka import broker, topic  # noqa: F401  (fixtures)
