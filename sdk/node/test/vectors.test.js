'use strict';
// The SDK against every shared protocol test vector (sdk/vectors/, format in its README).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { serve, exitStatus } = require('..');

const VECTORS = path.join(__dirname, '..', '..', 'vectors');
const b64 = (s) => Buffer.from(s, 'base64');

// The handlers every SDK's test implements identically.
const handlers = {
  echo: () => ({ process: (ms) => ms }),
  'upper-ascii': () => ({
    process: (ms) => ms.map((m) => Buffer.from(m.map((b) => (b >= 0x61 && b <= 0x7a ? b - 32 : b)))),
  }),
  'split-comma': () => ({
    process: function* (ms) {
      for (const m of ms) {
        let at = 0;
        let k;
        while ((k = m.indexOf(0x2c, at)) >= 0) {
          yield m.subarray(at, k);
          at = k + 1;
        }
        yield m.subarray(at);
      }
    },
  }),
  drop: () => ({ process: () => [] }),
  'count-batch': () => {
    let batches = 0;
    let messages = 0;
    return {
      process: (ms) => {
        batches += 1;
        messages += ms.length;
        return [String(ms.length)];
      },
      report: () => ({ batches, messages }),
    };
  },
  collect: () => {
    const loaded = [];
    return {
      loaded,
      load: async (ms) => {
        loaded.push(ms.map((m) => Buffer.from(m)));
      },
      report: () => ({ batches: loaded.length, messages: loaded.reduce((n, b) => n + b.length, 0) }),
    };
  },
  emit: (args) => {
    const cycles = args.cycles.map((c) => c.map(b64));
    const commits = [];
    return {
      commits,
      extract: (req) => {
        const cycle = req === null ? 0 : req.cycle;
        return cycle < cycles.length ? cycles[cycle] : [];
      },
      onWindowDone: (req) => commits.push(req.cycle - 1),
    };
  },
  'emit-range': () => {
    const commits = [];
    return {
      commits,
      extract: function* (req) {
        for (let i = req.start; i < req.end; i++) yield String(i);
      },
      onWindowDone: (req) => commits.push(req.cycle - 1),
    };
  },
};

async function run(vector) {
  const worker = handlers[vector.handler](vector.args || {});
  const written = [];
  let size = 0;
  const output = {
    write(buf) {
      written.push(Buffer.from(buf));
      size += buf.length;
      return true;
    },
  };
  const marks = [];
  const chunks = vector.stdin.map(b64);
  async function* input() {
    for (const c of chunks) {
      marks.push(size);
      yield c;
    }
    marks.push(size);
  }
  const env = { ...vector.env };
  const reporting = vector.handler === 'count-batch' || vector.handler === 'collect';
  const stateDir = reporting ? fs.mkdtempSync(path.join(os.tmpdir(), 'etlstage-vec-')) : '';
  env.ETLSTAGE_STATE_DIR = stateDir;
  let status;
  try {
    status = await serve(worker, { input: input(), output, env });
  } catch (err) {
    status = exitStatus(err);
    if (status === 1) throw err;
  }
  let report = null;
  if (stateDir) {
    const files = fs.readdirSync(stateDir).filter((f) => /^report-.*\.json$/.test(f));
    if (files.length) report = JSON.parse(fs.readFileSync(path.join(stateDir, files.sort().at(-1)), 'utf8'));
    fs.rmSync(stateDir, { recursive: true });
  }
  return { status, stdout: Buffer.concat(written), marks, worker, report };
}

const files = fs.readdirSync(VECTORS).filter((f) => f.endsWith('.json')).sort();
assert.ok(files.length >= 4, `vectors found in ${VECTORS}`);

for (const file of files) {
  test.describe(file, () => {
    for (const vector of JSON.parse(fs.readFileSync(path.join(VECTORS, file), 'utf8'))) {
      test(vector.name, async () => {
        const got = await run(vector);
        assert.equal(got.status, vector.exit, `exit status (${vector.about})`);
        if (vector.exit !== 0) return;
        assert.deepEqual(got.stdout, b64(vector.stdout), 'stdout');
        // replies[i]: written after chunk i-1 was read, before the next read; nothing after end of input.
        const total = got.stdout.length;
        const bounds = [...got.marks, total].slice(0, vector.stdin.length + 1);
        while (bounds.length < vector.stdin.length + 1) bounds.push(total);
        if (got.marks.length > vector.stdin.length) assert.equal(got.marks[vector.stdin.length], total, 'output after end of input');
        const replies = bounds.map((b, i) => got.stdout.subarray(i ? bounds[i - 1] : 0, b));
        assert.deepEqual(replies, vector.replies.map(b64), 'replies per read');
        if (vector.loaded !== null) assert.deepEqual(got.worker.loaded, vector.loaded.map((b) => b.map(b64)), 'loaded');
        if (vector.commits !== null) assert.deepEqual(got.worker.commits, vector.commits, 'commits');
        assert.deepEqual(got.report, vector.report, 'report');
      });
    }
  });
}
