"""A pass-through T-worker on the Python SDK (bench/sdk_throughput.py)."""

from etlstage.worker import run_transformer

if __name__ == "__main__":
    run_transformer(lambda messages: messages)
