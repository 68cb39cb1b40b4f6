#!/usr/bin/env node
// sink.js - an idempotent L-worker with the etlstage Node.js SDK, for a stage with
// `mode: batch` and `batch_id: true`: each batch becomes one file named after its id in
// DIR (default $ETLSTAGE_STATE_DIR/sink-<instance>), written, fsynced and renamed by
// FileSink before the batch is acknowledged. A batch sent again after a crash keeps its
// id, finds its file there and is not written twice. Reports {"loaded": N, "output": DIR}.
//
// Usage: node sink.js [DIR]
'use strict';
const path = require('node:path');
const { runLoader, FileSink } = require('..');

let dir;
let sink;
let loaded = 0;

runLoader({
  setup(scenario) {
    dir = process.argv[2] || path.join(scenario.stateDir || '.', `sink-${scenario.instance}`);
    sink = new FileSink(dir);
  },
  load(messages, batchId) {
    if (sink.commit(batchId, messages)) loaded += messages.length; // false: committed before, skipped
  },
  report: () => ({ loaded, output: dir }),
});
