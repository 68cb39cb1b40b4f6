"""Pass-through record processor on amazon_kclpy's v3 interface: decodes every record."""

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


class PassThrough(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        self.bytes = 0

    def process_records(self, process_records_input):
        for record in process_records_input.records:
            self.bytes += len(record.binary_data)

    def lease_lost(self, lease_lost_input):
        pass

    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input):
        pass


if __name__ == "__main__":
    kcl.KCLProcess(PassThrough()).run()
