'use strict';
// A worker whose code fails still sends the answers it completed before (the supervisor
// then sends only the failed request again), never a part of the failed one.
const test = require('node:test');
const assert = require('node:assert/strict');
const { serve, exitStatus } = require('..');

async function run(worker, input, env = { ETLSTAGE_TYPE: 'T', ETLSTAGE_MODE: 'single' }) {
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

test('a failing transformer: the answers before it go out, nothing of its own', async () => {
  const worker = {
    process([m]) {
      if (m.toString() === 'c') throw new Error('cannot take c');
      return [m, '+'];
    },
  };
  assert.deepEqual(await run(worker, ['a\nb\nc\nd\n']), [1, 'a\n+\n\0b\n+\n\0']);
});

test('an async failure after a synchronous answer in the same chunk', async () => {
  const worker = {
    process: ([m]) => (m.toString() === 'b' ? Promise.reject(new Error('no b')) : [m]),
  };
  assert.deepEqual(await run(worker, ['a\nb\n']), [1, 'a\n\0']);
});

test('a result holding a marker: the answers before its own go out, then exit 3', async () => {
  const worker = { process: ([m]) => (m.toString() === 'c' ? ['ok', 'bad\0'] : [m]) };
  assert.deepEqual(await run(worker, ['a\nb\nc\nd\n']), [3, 'a\n\0b\n\0']);
});

test('results holding markers of two kinds: the answers before the first one go out', async () => {
  // b's answer holds a BNC and c's an EOM: the cut is at b's, whatever the kinds' order
  const worker = { process: ([m]) => ({ b: ['q\x11', 'p'], c: ['r\n'] })[m.toString()] || [m] };
  assert.deepEqual(await run(worker, ['a\nb\nc\n']), [3, 'a\n\0']);
  const output = { write: () => true };
  async function* input() {
    yield Buffer.from('a\nb\nc\n');
  }
  await assert.rejects(serve(worker, { input: input(), output, env: { ETLSTAGE_TYPE: 'T', ETLSTAGE_STAGE: 'up' } }), {
    message: /^a result of stage 'up' contains its BNC marker 0x11: "q\\u0011"; /,
  });
});

test('a violation in the input after complete answers: they go out', async () => {
  assert.deepEqual(await run({ process: (ms) => ms }, ['a\n\x17']), [3, 'a\n\0']);
});

test('a plain extraction goes out as it grows, and the part before a failure with it', async () => {
  const big = 'x'.repeat(1000);
  const worker = {
    *extract() {
      for (let i = 0; i < 3000; i++) yield big; // 3 MB
      throw new Error('source lost');
    },
  };
  const [status, out] = await run(worker, [], { ETLSTAGE_TYPE: 'E', ETLSTAGE_MODE: 'plain' });
  assert.equal(status, 1);
  assert.ok(out.length >= 2 * (1 << 20) && out.length % 1001 === 0, `${out.length} bytes, whole messages`);
});
