"""Kafka extractor and loader (confluent-kafka), and a one-node broker for tests and demos."""
