"""Stock E-worker: reads every shard of an Amazon Kinesis stream (``etlstage-kinesis``).

Checkpoints per shard in SQLite under ``ETLSTAGE_STATE_DIR``, committed when the next
cycle request shows the previous window was loaded; children shards after their
parents; KPL aggregated records de-aggregated.  See ``docs/workers/kinesis.md``.
"""
