'use strict';
// Batch ids (ETLSTAGE_BATCH_ID=1): the header is stripped and its id given to load; the
// FileSink helper commits a batch once.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { serve, exitStatus, FileSink } = require('..');

const ID = '0123456789abcdef0123456789abcdef';
const ENV = { ETLSTAGE_TYPE: 'L', ETLSTAGE_MODE: 'batch', ETLSTAGE_BATCH_SIZE: '2', ETLSTAGE_BATCH_ID: '1' };

async function run(worker, input, env = ENV) {
  const written = [];
  const output = { write: (b) => written.push(Buffer.from(b)) };
  async function* chunks() {
    for (const c of input) yield Buffer.from(c, 'latin1');
  }
  let status = 0;
  try {
    await serve(worker, { input: chunks(), output, env });
  } catch (err) {
    status = exitStatus(err);
  }
  return [status, Buffer.concat(written).toString('latin1')];
}

test('the header is stripped and its id is load\'s second argument', async () => {
  const seen = [];
  const worker = { load: (ms, id) => void seen.push([ms.map(String), id]) };
  const input = [`etlstage-batch-id ${ID}\na\nb\n\x17`, `etlstage-batch-id ${'f'.repeat(32)}\nc\n\x17`];
  assert.deepEqual(await run(worker, input), [0, '\0\0']);
  assert.deepEqual(seen, [[['a', 'b'], ID], [['c'], 'f'.repeat(32)]]);
});

test('without ETLSTAGE_BATCH_ID the first message is a message', async () => {
  const seen = [];
  const worker = { load: (ms, id) => void seen.push([ms.map(String), id]) };
  const env = { ...ENV, ETLSTAGE_BATCH_ID: undefined };
  assert.deepEqual(await run(worker, [`etlstage-batch-id ${ID}\na\n\x17`], env), [0, '\0']);
  assert.deepEqual(seen, [[[`etlstage-batch-id ${ID}`, 'a'], undefined]]);
});

test('a batch without its header is a protocol violation (exit 3), nothing loaded', async () => {
  const seen = [];
  assert.deepEqual(await run({ load: (ms) => void seen.push(ms) }, ['a\nb\n\x17']), [3, '']);
  assert.deepEqual(seen, []);
});

test('FileSink commits a batch once, whole, and refuses a batch without an id', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'etlstage-sink-'));
  const sink = new FileSink(dir);
  assert.equal(sink.commit(ID, [Buffer.from('a'), 'b']), true);
  assert.equal(sink.commit(ID, ['a', 'b']), false);
  assert.deepEqual(fs.readdirSync(dir), [`batch-${ID}.txt`]);
  assert.equal(fs.readFileSync(path.join(dir, `batch-${ID}.txt`), 'latin1'), 'a\nb\n');
  assert.throws(() => sink.commit(undefined, ['x']), /batch_id: true/);
});
