"""A record processor written against amazon_kclpy's v3 interface, as a KCL team would.

Test instrumentation only: every record and event goes to the file named by
KCL_TEST_OUT (one line each); it checkpoints every KCL_TEST_CHECKPOINT_EVERY records.
"""

import os
import sys

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


class RecordProcessor(processor.RecordProcessorBase):
    def __init__(self):
        self.out = open(os.environ["KCL_TEST_OUT"], "a", buffering=1)
        self.every = int(os.environ.get("KCL_TEST_CHECKPOINT_EVERY", "500"))
        self.since = 0
        self.shard = None

    def event(self, *words):
        self.out.write("EVENT " + " ".join(str(w) for w in words) + "\n")

    def checkpoint(self, checkpointer, seq=None, sub=None):
        try:
            checkpointer.checkpoint(seq, sub)
            self.event("checkpoint-ok", self.shard, seq, sub)
        except kcl.CheckpointError as e:
            self.event("checkpoint-error", self.shard, seq, sub, e.value)

    def initialize(self, initialize_input):
        self.shard = initialize_input.shard_id
        self.event("initialize", self.shard, initialize_input.sequence_number, initialize_input.sub_sequence_number)

    def process_records(self, process_records_input):
        last = None
        for record in process_records_input.records:
            data = record.binary_data.decode("utf-8")
            self.out.write(
                f"RECORD {self.shard} {record.sequence_number} {record.sub_sequence_number} "
                f"{record.partition_key} {record.timestamp_millis} {data}\n"
            )
            last = record
        self.since += len(process_records_input.records)
        print(f"processed a batch of {len(process_records_input.records)}")  # the sample app prints to stdout too
        sys.stdout.flush()
        if last is not None and self.since >= self.every:
            self.since = 0
            self.checkpoint(process_records_input.checkpointer, last.sequence_number, last.sub_sequence_number)
        bad = os.environ.get("KCL_TEST_BAD_CHECKPOINT")
        if bad:
            self.checkpoint(process_records_input.checkpointer, bad, 0)

    def lease_lost(self, lease_lost_input):
        self.event("lease_lost", self.shard)

    def shard_ended(self, shard_ended_input):
        self.event("shard_ended", self.shard)
        self.checkpoint(shard_ended_input.checkpointer)

    def shutdown_requested(self, shutdown_requested_input):
        self.event("shutdown_requested", self.shard)
        self.checkpoint(shutdown_requested_input.checkpointer)


if __name__ == "__main__":
    kcl.KCLProcess(RecordProcessor()).run()
