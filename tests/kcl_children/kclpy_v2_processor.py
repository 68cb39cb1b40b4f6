"""A record processor written against amazon_kclpy's v2 interface (shutdown with a reason).

Test instrumentation only: records and events go to the file named by KCL_TEST_OUT.
"""

import os

from amazon_kclpy import kcl
from amazon_kclpy.v2 import processor


class RecordProcessor(processor.RecordProcessorBase):
    def __init__(self):
        self.out = open(os.environ["KCL_TEST_OUT"], "a", buffering=1)
        self.every = int(os.environ.get("KCL_TEST_CHECKPOINT_EVERY", "500"))
        self.since = 0
        self.shard = None

    def event(self, *words):
        self.out.write("EVENT " + " ".join(str(w) for w in words) + "\n")

    def initialize(self, initialize_input):
        self.shard = initialize_input.shard_id
        self.event("initialize", self.shard, initialize_input.sequence_number, initialize_input.sub_sequence_number)

    def process_records(self, process_records_input):
        records = process_records_input.records
        for record in records:
            self.out.write(
                f"RECORD {self.shard} {record.sequence_number} {record.sub_sequence_number} "
                f"{record.partition_key} {record.timestamp_millis} {record.binary_data.decode()}\n"
            )
        self.since += len(records)
        if records and self.since >= self.every:
            self.since = 0
            try:
                process_records_input.checkpointer.checkpoint()  # at the last record delivered
                self.event("checkpoint-ok", self.shard, None, None)
            except kcl.CheckpointError as e:
                self.event("checkpoint-error", self.shard, None, None, e.value)

    def shutdown(self, shutdown_input):
        self.event("shutdown", self.shard, shutdown_input.reason)
        if shutdown_input.reason == "TERMINATE":
            shutdown_input.checkpointer.checkpoint()
            self.event("checkpoint-ok", self.shard, "SHARD_END", None)

    def shutdown_requested(self, shutdown_requested_input):
        self.event("shutdown_requested", self.shard)


if __name__ == "__main__":
    kcl.KCLProcess(RecordProcessor()).run()
