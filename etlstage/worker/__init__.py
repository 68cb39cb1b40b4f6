"""The Python worker SDK.

A transformer in a few lines::

    from etlstage.worker import run_transformer

    def upper(messages: list[bytes]) -> list[bytes]:
        return [m.upper() for m in messages]

    if __name__ == "__main__":
        run_transformer(upper)

Markers, mode and batch size come from the ``ETLSTAGE_*`` environment the supervisor
sets; the same code works in single, batch, worker-driven and supervisor-driven modes.
"""

from etlstage.worker.base import Extractor, Loader, Request, Transformer, Worker
from etlstage.worker.runner import main, run_extractor, run_loader, run_transformer, serve

__all__ = [
    "Extractor",
    "Loader",
    "Request",
    "Transformer",
    "Worker",
    "main",
    "run_extractor",
    "run_loader",
    "run_transformer",
    "serve",
]
