"""Bench T-worker: returns every message unchanged."""

from etlstage.worker import run_transformer

if __name__ == "__main__":
    run_transformer(lambda messages: messages)
