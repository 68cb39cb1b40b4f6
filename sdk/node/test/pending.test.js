'use strict';
// Loaders that finish batches in the background (maxPending >= 1): the SDK reads and
// passes on the next batch while one loads, writes the EOPs in request order, each only
// once its batch is done, and stops on a failed one.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { serve, exitStatus } = require('..');

const b64 = (s) => Buffer.from(s, 'base64');
const VECTORS = path.join(__dirname, '..', '..', 'vectors');

/** An input whose chunks the test pushes; marks: output size at each read. */
function feeder(size) {
  const queue = [];
  let wake = null;
  let ended = false;
  const marks = [];
  return {
    marks,
    push(c) {
      queue.push(Buffer.from(c, 'latin1'));
      if (wake) wake();
    },
    end() {
      ended = true;
      if (wake) wake();
    },
    async *[Symbol.asyncIterator]() {
      for (;;) {
        marks.push(size());
        while (!queue.length && !ended) await new Promise((r) => (wake = r));
        wake = null;
        if (!queue.length) return;
        yield queue.shift();
      }
    },
  };
}

function output() {
  const written = [];
  return {
    written,
    text: () => Buffer.concat(written).toString('latin1'),
    size: () => written.reduce((n, b) => n + b.length, 0),
    write: (b) => written.push(Buffer.from(b)),
  };
}

const tick = (ms) => new Promise((r) => setTimeout(r, ms));

test('the loader vectors, with batches loading in the background (done at once)', async () => {
  const vectors = JSON.parse(fs.readFileSync(path.join(VECTORS, 'loader.json'), 'utf8'));
  const runs = vectors.filter((v) => v.handler === 'collect' && v.exit === 0);
  assert.ok(runs.length >= 3);
  for (const v of runs) {
    const loaded = [];
    const worker = {
      maxPending: 1,
      load: async (ms) => {
        loaded.push(ms.map((m) => Buffer.from(m)));
      },
      report: () => ({ batches: loaded.length, messages: loaded.reduce((n, b) => n + b.length, 0) }),
    };
    const out = output();
    const input = feeder(out.size);
    v.stdin.forEach((c) => input.push(b64(c)));
    input.end();
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'etlstage-pending-'));
    await serve(worker, { input, output: out, env: { ...v.env, ETLSTAGE_STATE_DIR: stateDir } });
    const report = JSON.parse(fs.readFileSync(path.join(stateDir, fs.readdirSync(stateDir)[0]), 'utf8'));
    fs.rmSync(stateDir, { recursive: true });
    const all = Buffer.concat(out.written);
    assert.deepEqual(all, b64(v.stdout), v.name);
    const bounds = [...input.marks, all.length].slice(0, v.stdin.length + 1);
    const replies = bounds.map((b, i) => all.subarray(i ? bounds[i - 1] : 0, b));
    assert.deepEqual(replies, v.replies.map(b64), `${v.name}: replies per read`);
    assert.deepEqual(loaded, v.loaded.map((b) => b.map(b64)), v.name);
    assert.deepEqual(report, v.report, v.name);
  }
});

/** Batch i finishes only once batch i+1 reached load() (the last at once), else fails after 3 s. */
function overlapping(total) {
  const loaded = [];
  const release = [];
  return {
    loaded,
    maxPending: 1,
    load(ms) {
      const i = loaded.length;
      loaded.push(ms.map(String).join(','));
      if (i > 0) release[i - 1]();
      return new Promise((resolve, reject) => {
        release[i] = resolve;
        if (i === total - 1) resolve();
        setTimeout(() => reject(new Error(`batch ${i}: the next batch was not read while it was loading`)), 3000);
      });
    },
  };
}

for (const [mode, driver, size, input] of [
  ['batch', 'supervisor', '2', 'a\nb\n\x17c\n\x17d\n\x17'],
  ['batch', 'worker', '1', 'a\nb\nc\n'], // a BNC waits for the EOPs before it: full batches only
  ['single', 'supervisor', '1', 'a\nb\nc\n'],
]) {
  test(`${mode} (${driver}): a batch loads while the next one is read and passed on`, async () => {
    const env = { ETLSTAGE_TYPE: 'L', ETLSTAGE_MODE: mode, ETLSTAGE_BATCH_SIZE: size, ETLSTAGE_BATCH_DRIVER: driver };
    const chunks = input.match(/[^\x17\n]*[\x17\n]/g); // one request per read, too
    for (const split of [[input], chunks]) {
      const w = overlapping(3);
      const o = output();
      const feed = feeder(o.size);
      split.forEach((c) => feed.push(c));
      feed.end();
      await serve(w, { input: feed, output: o, env });
      assert.equal(o.text(), '\0\0\0');
      assert.equal(w.loaded.length, 3);
    }
  });
}

/** Batch i resolves when gates[i]() is called (at once without a gate), or fails per `fail`. */
function gated(gates, fail = new Set(), maxPending = 1) {
  const calls = [];
  const open = {};
  return {
    calls,
    open,
    maxPending,
    load(ms) {
      const i = calls.length;
      calls.push(ms.map(String));
      return new Promise((resolve, reject) => {
        const done = () => (fail.has(i) ? reject(new Error(`disk full while writing batch ${i}`)) : resolve());
        if (gates.has(i)) open[i] = done;
        else setImmediate(done);
      });
    },
  };
}

const batchEnv = { ETLSTAGE_TYPE: 'L', ETLSTAGE_MODE: 'batch', ETLSTAGE_BATCH_SIZE: '10' };

test('an EOP goes out when its batch is done, not at the next read', async () => {
  const w = gated(new Set([0]));
  const out = output();
  const input = feeder(out.size);
  const served = serve(w, { input, output: out, env: batchEnv });
  input.push('a\nb\n\x17');
  await tick(30);
  assert.equal(out.text(), '', 'EOP before the batch was done');
  w.open[0]();
  await tick(30);
  assert.equal(out.text(), '\0', 'no EOP while the worker waits for input');
  input.end();
  assert.equal(await served, 0);
});

test('EOPs in request order; at most maxPending unfinished when load() is called', async () => {
  const w = gated(new Set([0, 1]));
  const out = output();
  const input = feeder(out.size);
  const served = serve(w, { input, output: out, env: batchEnv });
  input.push('a\n\x17b\n\x17c\n\x17');
  await tick(30);
  assert.equal(w.calls.length, 2, 'batch 2 must wait until batch 0 is done');
  w.open[1]();
  await tick(30);
  assert.equal(out.text(), '', "batch 1's EOP overtook batch 0's");
  w.open[0]();
  await tick(30);
  assert.equal(out.text(), '\0\0\0');
  input.end();
  assert.equal(await served, 0);
});

test('end of input waits for the batches still loading', async () => {
  const w = gated(new Set([0]));
  const out = output();
  const input = feeder(out.size);
  const served = serve(w, { input, output: out, env: batchEnv });
  input.push('a\n\x17');
  input.end();
  await tick(30);
  assert.equal(out.text(), '');
  w.open[0]();
  assert.equal(await served, 0);
  assert.equal(out.text(), '\0');
});

test('a failed batch stops the worker unacknowledged, after the EOPs before it', async () => {
  for (const whileReading of [false, true]) {
    const w = gated(new Set([1]), new Set([1]));
    const out = output();
    const input = feeder(out.size);
    const served = serve(w, { input, output: out, env: batchEnv }).then(() => 0, exitStatus);
    input.push('a\n\x17b\n\x17');
    if (!whileReading) input.push('c\n\x17');
    await tick(30);
    w.open[1]();
    assert.equal(await served, 1);
    assert.equal(out.text(), '\0');
  }
});

test('without maxPending each load is awaited before the next batch is passed on', async () => {
  const w = gated(new Set([0]), new Set(), 0);
  const out = output();
  const input = feeder(out.size);
  const served = serve(w, { input, output: out, env: batchEnv });
  input.push('a\n\x17b\n\x17');
  await tick(30);
  assert.equal(w.calls.length, 1);
  w.open[0]();
  input.end();
  assert.equal(await served, 0);
  assert.equal(out.text(), '\0\0');
});

test('an EOP goes out when its batch is done, also during a wait within one chunk', async () => {
  const w = gated(new Set([0, 1]));
  const out = output();
  const input = feeder(out.size);
  const served = serve(w, { input, output: out, env: batchEnv });
  input.push('a\n\x17b\n\x17c\n\x17d\n\x17');
  await tick(30);
  w.open[0](); // batch 2 is passed on; batch 3 waits for batch 1
  await tick(30);
  assert.equal(w.calls.length, 3);
  assert.equal(out.text(), '\0');
  w.open[1]();
  input.end();
  assert.equal(await served, 0);
  assert.equal(out.text(), '\0\0\0\0');
});
