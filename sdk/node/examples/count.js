#!/usr/bin/env node
// count.js - an E-worker with the etlstage Node.js SDK: emits the numbers 1..N.
//
// Usage: node count.js N [PER_CYCLE]
// - plain mode: 1 .. N, then exit 0.
// - cyclic, worker-managed offsets: each request gets the next PER_CYCLE numbers (default
//   3). The offset lives in $ETLSTAGE_STATE_DIR/count-<instance>.offset and is committed
//   when the NEXT request arrives (the previous window was loaded), never on end of input.
// - cyclic, supervisor-managed offsets ({"start": S, "end": E}): S+1 .. E, capped at N.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { runExtractor } = require('..');

const total = Number(process.argv[2]);
const perCycle = Number(process.argv[3] || '3');
if (!Number.isInteger(total) || total < 0 || !Number.isInteger(perCycle) || perCycle < 1) {
  process.stderr.write(`count.js: usage: node count.js N [PER_CYCLE], got ${process.argv.slice(2).join(' ')}\n`);
  process.exit(2);
}

let offsetFile;
let committed = 0; // the last number of the last window known loaded
let emitted = 0;

function* numbers(first, last) {
  for (let n = first; n <= last; n++) yield String(n);
}

runExtractor({
  setup(scenario) {
    offsetFile = path.join(scenario.stateDir || '.', `count-${scenario.instance}.offset`);
    if (fs.existsSync(offsetFile)) committed = Number(fs.readFileSync(offsetFile, 'utf8').trim() || '0');
    emitted = committed;
  },
  extract(request) {
    if (request === null) return numbers(1, total);
    if (request.start !== undefined || request.end !== undefined) {
      return numbers(Number(request.start) + 1, Math.min(Number(request.end), total));
    }
    const first = emitted + 1;
    emitted = Math.max(emitted, Math.min(emitted + perCycle, total));
    return numbers(first, emitted);
  },
  onWindowDone() {
    if (emitted === committed) return;
    const fd = fs.openSync(offsetFile + '.tmp', 'w'); // write, sync, rename: never half a file
    fs.writeSync(fd, `${emitted}\n`);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(offsetFile + '.tmp', offsetFile);
    committed = emitted;
  },
});
