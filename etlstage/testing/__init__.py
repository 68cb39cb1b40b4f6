"""Testing tools for worker authors: the in-memory supervisor harness and the pytest plugin.

``pip install etlstage`` gives every pytest run the fixture ``stage_harness``::

    def test_upper(stage_harness):
        result = stage_harness.run(["./upper"], type="T", mode="batch", batch_size=2,
                                   inputs=[b"a", b"b", b"c"])
        assert result.batches == [[b"A", b"B"], [b"C"]]
"""

from etlstage.testing.harness import HarnessResult, StageHarness, WorkerFailed

__all__ = ["HarnessResult", "StageHarness", "WorkerFailed"]
