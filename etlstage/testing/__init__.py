"""Testing tools: the in-memory supervisor harness, pipeline fixture tests and the pytest plugin.

``pip install etlstage`` gives every pytest run the fixture ``stage_harness``::

    def test_upper(stage_harness):
        result = stage_harness.run(["./upper"], type="T", mode="batch", batch_size=2,
                                   inputs=[b"a", b"b", b"c"])
        assert result.batches == [[b"A", b"B"], [b"C"]]

A whole pipeline, from input files to expected outputs (``etlstage test``)::

    def test_pipeline(pipeline_test):
        pipeline_test("tests/upper.test.yaml")
"""

from etlstage.testing.harness import HarnessResult, StageHarness, WorkerFailed
from etlstage.testing.pipeline import CaseResult, PipelineCase, load_tests

__all__ = ["CaseResult", "HarnessResult", "PipelineCase", "StageHarness", "WorkerFailed", "load_tests"]
