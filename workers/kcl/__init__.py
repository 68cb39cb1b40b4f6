"""Run existing KCL MultiLangDaemon record processors as etlstage workers.

``etlstage-kcl-adapter [options] -- <processor command>`` is a marker-protocol T- or
L-worker that spawns the record processor (the "MLD child") and plays the Amazon KCL
MultiLangDaemon towards it: JSON lines over the child's stdin/stdout (``initialize``,
``processRecords``, ``checkpoint``, ``shardEnded``, ``shutdownRequested``,
``leaseLost``/``shutdown``, ``status``).  See ``docs/kcl-multilang.md``.

Modules: :mod:`.records` (input messages -> Kinesis records), :mod:`.wire` (the MLD
JSON messages of protocol V1 and V2), :mod:`.store` (checkpoints and sequence counters
in SQLite), :mod:`.child` (the child process and its line I/O with time limits),
:mod:`.session` (one shard's conversation), :mod:`.adapter` (the etlstage worker),
:mod:`.cli` (the console script).
"""
