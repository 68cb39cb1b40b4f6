#!/usr/bin/env node
// upper.js - an etlstage T-worker in Node.js (20+, no npm packages): uppercases every
// message (ASCII a-z only, every other byte unchanged).
//
// Modes: single, batch supervisor-driven, batch worker-driven (BNC).
// Markers: ETLSTAGE_EOM / _EOP / _EOB / _BNC, two hex digits each (defaults 0a 00 17 11).
//
// Try:  printf 'hello\n' | ETLSTAGE_TYPE=T ETLSTAGE_MODE=single node upper.js | od -c
//
// stdin arrives in chunks ('data' events, Buffers) that cut messages anywhere; the
// replies a chunk completes go out in ONE process.stdout.write.  stdout carries protocol
// bytes only: log with console.error (stderr), never console.log.
'use strict';

function fail(code, text) {
  process.stderr.write(`upper.js: ${text}\n`);
  process.exit(code);
}

function marker(name, fallback) {
  const value = process.env[`ETLSTAGE_${name}`];
  if (value === undefined || value === '') return fallback;
  if (!/^[0-9a-fA-F]{2}$/.test(value)) fail(2, `ETLSTAGE_${name}=${value}: expected two hex digits such as 0a`);
  return parseInt(value, 16);
}

const EOM = marker('EOM', 0x0a);
const EOP = marker('EOP', 0x00);
const EOB = marker('EOB', 0x17);
const BNC = marker('BNC', 0x11);
if (new Set([EOM, EOP, EOB, BNC]).size !== 4) fail(2, 'the four ETLSTAGE_* markers must be distinct bytes');

const mode = process.env.ETLSTAGE_MODE || 'single';
const driver = process.env.ETLSTAGE_BATCH_DRIVER || 'supervisor';
const batchSize = Number(process.env.ETLSTAGE_BATCH_SIZE || '1');
if (mode !== 'single' && mode !== 'batch') fail(2, `ETLSTAGE_MODE=${mode}: expected single or batch`);
if (driver !== 'supervisor' && driver !== 'worker') fail(2, `ETLSTAGE_BATCH_DRIVER=${driver}: expected supervisor or worker`);
if (!Number.isInteger(batchSize) || batchSize < 1) fail(2, `ETLSTAGE_BATCH_SIZE=${process.env.ETLSTAGE_BATCH_SIZE}: expected an integer >= 1`);
const batchMode = mode === 'batch';
const workerDriven = batchMode && driver === 'worker';

// The user's code: one message in, zero or more results out.
function transform(message) {
  const out = Buffer.from(message); // a copy: `message` is a view into the input chunk
  for (let i = 0; i < out.length; i++) {
    const c = out[i];
    if (c >= 0x61 && c <= 0x7a) out[i] = c - 0x20;
  }
  return [out];
}

const EOM_BUF = Buffer.from([EOM]);
const EOP_BUF = Buffer.from([EOP]);
const BNC_BUF = Buffer.from([BNC]);

let tail = Buffer.alloc(0); // bytes of a message not yet ended by EOM
let batch = [];             // messages of the open batch

// Results of the whole batch followed by EOP, as a list of Buffers.
function runBatch(messages, reply) {
  for (const message of messages) {
    for (const result of transform(message)) {
      if (result.includes(EOM) || result.includes(EOP) || result.includes(EOB) || result.includes(BNC)) {
        fail(3, `a result contains a marker byte: ${JSON.stringify(result.subarray(0, 40).toString('latin1'))}`);
      }
      reply.push(result, EOM_BUF);
    }
  }
  reply.push(EOP_BUF);
}

function onMessage(message, reply) {
  if (!batchMode) {
    runBatch([message], reply);
    return;
  }
  batch.push(message);
  if (!workerDriven) return; // supervisor-driven: wait for EOB
  if (batch.length >= batchSize) {
    runBatch(batch, reply); // full: process it, and no BNC for the message that filled it
    batch = [];
  } else {
    reply.push(BNC_BUF); // short of BATCH_SIZE: ask for more
  }
}

process.stdin.on('data', (chunk) => {
  if (chunk.includes(EOP) || chunk.includes(BNC)) fail(3, 'EOP or BNC on stdin: only a worker writes those');
  const data = tail.length ? Buffer.concat([tail, chunk]) : chunk;
  const reply = [];
  let pos = 0;
  for (;;) {
    const m = data.indexOf(EOM, pos);
    const b = data.indexOf(EOB, pos);
    if (m < 0 && b < 0) break;
    if (b >= 0 && (m < 0 || b < m)) {
      if (b !== pos) fail(3, 'EOB in the middle of a message (its bytes were not ended by EOM)');
      if (!batchMode) fail(3, 'EOB received in single mode');
      runBatch(batch, reply); // a batch, full or partial, is closed
      batch = [];
      pos = b + 1;
    } else {
      onMessage(data.subarray(pos, m), reply);
      pos = m + 1;
    }
  }
  tail = Buffer.from(data.subarray(pos)); // copied so the big chunk can be freed
  if (reply.length) process.stdout.write(Buffer.concat(reply));
});

process.stdin.on('end', () => {
  if (batch.length || tail.length) {
    console.error(`upper.js: stdin closed with an unfinished batch (${batch.length} messages): not processed, the supervisor sends it again`);
  }
  // No process.exit(): Node exits 0 by itself once stdout is drained.
});

process.stdout.on('error', (err) => fail(1, `cannot write to stdout (did the supervisor go away?): ${err.message}`));
