"""The same pass-through as a native marker-protocol T-worker (etlstage SDK)."""

from etlstage.worker import run_transformer

if __name__ == "__main__":
    run_transformer(lambda messages: messages)
