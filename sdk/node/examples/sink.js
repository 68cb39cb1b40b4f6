#!/usr/bin/env node
// sink.js - an L-worker with the etlstage Node.js SDK: appends each message, one line
// each, to FILE (default $ETLSTAGE_STATE_DIR/sink-<instance>.out) and syncs it before the
// batch is acknowledged. Reports {"loaded": N}.
//
// Usage: node sink.js [FILE]
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { runLoader } = require('..');

let fd;
let loaded = 0;

runLoader({
  setup(scenario) {
    const file = process.argv[2] || path.join(scenario.stateDir || '.', `sink-${scenario.instance}.out`);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fd = fs.openSync(file, 'a');
  },
  load(messages) {
    const lines = [];
    for (const m of messages) lines.push(m, Buffer.from('\n'));
    fs.writeSync(fd, Buffer.concat(lines));
    fs.fsyncSync(fd); // durable before the SDK writes EOP
    loaded += messages.length;
  },
  report: () => ({ loaded }),
  teardown() {
    if (fd !== undefined) fs.closeSync(fd);
  },
});
