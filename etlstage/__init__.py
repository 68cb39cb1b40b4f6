"""etlstage: an ETL stage supervisor/worker framework.

Workers in any language are driven over stdin/stdout with a byte-marker protocol;
see ``docs/protocol.md``.
"""

__version__ = "0.1.0"
