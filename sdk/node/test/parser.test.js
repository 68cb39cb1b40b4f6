'use strict';
// RequestParser.batches() (supervisor-driven batch mode) against feed(): the same
// messages in the same batches however the input is cut into chunks, messages begun in
// one chunk and ended in a later one included.
const test = require('node:test');
const assert = require('node:assert/strict');
const { RequestParser, EOB, scenarioFromEnv, ProtocolViolation } = require('..');

const { markers } = scenarioFromEnv({});

// feed()'s tokens grouped into batches, and the messages after the last EOB.
function viaFeed(chunks) {
  const p = new RequestParser(markers);
  const batches = [];
  let open = [];
  for (const c of chunks) {
    for (const t of p.feed(c)) {
      if (t === EOB) {
        batches.push(open);
        open = [];
      } else open.push(t.toString('latin1'));
    }
  }
  return { batches, open, pending: p.pendingBytes };
}

function viaBatches(chunks) {
  const p = new RequestParser(markers);
  const batches = [];
  for (const c of chunks) for (const b of p.batches(c)) batches.push(b.map((m) => m.toString('latin1')));
  return { batches, open: p.open.map((m) => m.toString('latin1')), pending: p.pendingBytes };
}

test('batches() splits like feed() at every cut of the input', () => {
  const input = Buffer.from('a\nbb\n\x17\x17ccc\n\x17d\ne', 'latin1');
  for (let i = 0; i <= input.length; i++) {
    for (let j = i; j <= input.length; j++) {
      const chunks = [input.subarray(0, i), input.subarray(i, j), input.subarray(j)];
      const got = viaBatches(chunks);
      assert.deepEqual(got, viaFeed(chunks), `cut at ${i}, ${j}`);
      assert.deepEqual(got.batches, [['a', 'bb'], [], ['ccc']]);
      assert.deepEqual(got.open, ['d']);
      assert.equal(got.pending, 1);
    }
  }
});

test('a message over many chunks, one byte each', () => {
  const input = Buffer.from(`${'x'.repeat(50)}\ny\n\x17z`, 'latin1');
  const chunks = [...input].map((b) => Buffer.from([b]));
  const got = viaBatches(chunks);
  assert.deepEqual(got, viaFeed(chunks));
  assert.deepEqual(got.batches, [['x'.repeat(50), 'y']]);
  assert.equal(got.pending, 1);
});

test('batches(): EOB in the middle of a message, or EOP in the input, is a violation', () => {
  assert.throws(() => new RequestParser(markers).batches(Buffer.from('a\nb\x17')), ProtocolViolation);
  assert.throws(() => new RequestParser(markers).batches(Buffer.from('a\0\n\x17')), ProtocolViolation);
  const p = new RequestParser(markers); // the message begun in the chunk before
  p.batches(Buffer.from('a\nb'));
  assert.throws(() => p.batches(Buffer.from('c\x17d\n')), /EOB arrived in the middle of a message/);
});
