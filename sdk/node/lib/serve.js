'use strict';
// The worker side of the protocol: read chunks, split them, call the worker's code,
// write each chunk's answers in one write (results, EOP, BNC) before reading again.
const fs = require('node:fs');
const path = require('node:path');
const { scenarioFromEnv, EtlstageError, ProtocolViolation } = require('./scenario');
const { RequestParser, Reply, EOB } = require('./framing');

const SPILL = 1 << 20; // an extraction's messages go out once this many bytes wait

/** One cycle request to a cyclic extractor (null in plain mode). */
class Request {
  constructor(raw, cycle) {
    this.raw = raw; // Buffer: empty (worker-managed offsets) or {"start":S,"end":E}
    this.cycle = cycle;
    this.start = undefined;
    this.end = undefined;
    if (raw.length) {
      try {
        const doc = JSON.parse(raw.toString('utf8'));
        if (doc && typeof doc === 'object' && !Array.isArray(doc)) {
          this.start = doc.start;
          this.end = doc.end;
        }
      } catch {
        // not JSON: the raw request is all there is
      }
    }
  }
}

const isThenable = (v) => v !== null && typeof v === 'object' && typeof v.then === 'function';

/** The worker object for `kind`: an object with the hooks, or a plain function. */
function asWorker(worker, kind) {
  if (typeof worker === 'function') {
    const method = { E: 'extract', T: 'process', L: 'load' }[kind];
    return { [method]: worker };
  }
  if (worker && typeof worker === 'object') return worker;
  throw new TypeError(`expected a worker object or function, got ${typeof worker}`);
}

/** Results from a handler: an array, any iterable or async iterable, or a promise of one. */
async function collect(value) {
  if (isThenable(value)) value = await value;
  if (value === undefined || value === null) return [];
  if (Array.isArray(value)) return value;
  if (typeof value[Symbol.asyncIterator] === 'function') {
    const all = [];
    for await (const v of value) all.push(v);
    return all;
  }
  if (typeof value[Symbol.iterator] === 'function' && typeof value !== 'string' && !Buffer.isBuffer(value)) {
    return Array.from(value);
  }
  throw new TypeError('a worker must return an array or an iterable of results');
}

/** report-<instance>-<pid>.json in the stage's state directory, replaced atomically. */
function writeReport(worker, sc) {
  if (typeof worker.report !== 'function' || !sc.stateDir) return;
  const counters = worker.report();
  if (counters === undefined || counters === null) return;
  const file = path.join(sc.stateDir, `report-${sc.instance}-${process.pid}.json`);
  fs.writeFileSync(file + '.tmp', JSON.stringify(counters));
  fs.renameSync(file + '.tmp', file);
}

const HEADER = Buffer.from('etlstage-batch-id ');

/** A batch's messages after its header, with the header's id as `batchId` (load's second argument). */
function withBatchId(batch) {
  const head = batch[0];
  const id = head ? head.subarray(HEADER.length).toString('latin1') : '';
  if (!head || !head.subarray(0, HEADER.length).equals(HEADER) || !/^[0-9a-f]{32}$/.test(id)) {
    const shown = head ? JSON.stringify(head.subarray(0, 60).toString('latin1')) : 'an empty batch';
    throw new ProtocolViolation(`ETLSTAGE_BATCH_ID=1: expected a batch id header (etlstage-batch-id <32 hex digits>) first, got ${shown}`);
  }
  const messages = batch.slice(1);
  messages.batchId = id;
  return messages;
}

/** Writes to a Writable (or anything with write(buf)), waiting when it asks to. */
function writer(output) {
  return async (buf) => {
    if (buf.length === 0) return;
    if (output.write(buf) === false && typeof output.once === 'function') {
      await new Promise((resolve, reject) => {
        const done = (err) => {
          output.off?.('drain', done);
          output.off?.('error', done);
          if (err instanceof Error) reject(err);
          else resolve();
        };
        output.once('drain', done);
        output.once('error', done);
      });
    }
  };
}

/**
 * Serve requests until `input` ends; resolves to 0 on a clean end.
 *
 * options: kind ('E', 'T' or 'L'; default ETLSTAGE_TYPE), input (an async iterable of
 * Buffers, default process.stdin), output (a Writable, default process.stdout), env
 * (default process.env). Errors reject with `exitCode` set (2 configuration, 3
 * protocol violation); a worker's own error is an exit 1 (see exitStatus).
 */
async function serve(worker, options = {}) {
  const sc = scenarioFromEnv(options.env || process.env);
  const kind = options.kind || sc.type;
  const w = asWorker(worker, kind);
  const input = options.input || process.stdin;
  const write = writer(options.output || process.stdout);
  const { eop, bnc } = sc.markers;

  if (typeof w.setup === 'function') await w.setup(sc);
  const out = new Reply(sc.markers, sc.stage);
  // The answers so far; an error found among them (a result holding a marker) is thrown
  // once the answers before it are written.
  const send = async () => {
    const [answers, error] = out.take();
    if (answers.length) await write(answers);
    if (error) throw error;
  };
  try {
    const handle = (() => {
      const name = { E: 'extract', T: 'process', L: 'load' }[sc.type];
      if (typeof w[name] !== 'function') throw new TypeError(`a ${sc.type}-stage needs a worker with ${name}()`);
      return w[name].bind(w);
    })();

    // An extraction, streamed: messages go out as they come, past 1 MiB at a time.
    const extract = async (request) => {
      let value = handle(request);
      if (isThenable(value)) value = await value;
      if (value === undefined || value === null) return;
      if (typeof value[Symbol.asyncIterator] === 'function') {
        for await (const r of value) {
          out.result(r);
          if (out.len >= SPILL) await send();
        }
      } else if (typeof value[Symbol.iterator] === 'function' && typeof value !== 'string' && !Buffer.isBuffer(value)) {
        for (const r of value) {
          out.result(r);
          if (out.len >= SPILL) await send();
        }
      } else {
        throw new TypeError('an extractor must return an array or an iterable of messages');
      }
    };

    if (sc.type === 'E' && sc.mode === 'plain') {
      try {
        await extract(null);
      } catch (err) {
        out.abandon();
        await send();
        throw err;
      }
      writeReport(w, sc);
      await send();
      return 0;
    }

    // One batch: results (T) or a durable load (L), then the report, then EOP. Returns a
    // promise only when the worker's code did (no await per message otherwise).
    const isT = sc.type === 'T';
    const reports = typeof w.report === 'function' && sc.stateDir !== '';
    const finish = () => {
      if (reports) writeReport(w, sc);
      out.end(eop);
    };
    // A loader with maxPending >= 1 (a number) finishes batches in the background: a
    // promise from load() is not awaited before the next batch is read and passed on.
    // Its EOP is written once it resolves, in request order; at most maxPending batches
    // are unfinished when load() is called for the next one. A rejected one stops the
    // worker with that batch unacknowledged.
    const maxPending = sc.type === 'L' && Number.isInteger(w.maxPending) && w.maxPending > 0 ? w.maxPending : 0;
    const pending = []; // { promise, done, error }, oldest first
    // Acknowledges the finished batches at the front, in order; throws a failed one's error.
    const ackDone = () => {
      while (pending.length && pending[0].done) {
        const { error } = pending.shift();
        if (error) throw error;
        finish();
      }
    };
    // Waits until at most `keep` batches are unfinished, acknowledging them in order; the
    // EOPs written after a wait go out at once.
    const settle = async (keep) => {
      let waited = false;
      while (pending.length > keep) {
        await pending[0].promise;
        waited = true;
        ackDone();
      }
      ackDone();
      if (waited) await send();
    };
    const loadInBackground = (batch) => {
      if (pending.length > maxPending) return settle(maxPending).then(() => loadInBackground(batch));
      const r = handle(batch, batch.batchId);
      if (!isThenable(r)) return pending.length ? settle(0).then(finish) : finish();
      const entry = { done: false, error: null };
      entry.promise = Promise.resolve(r).then(
        () => {
          entry.done = true;
        },
        (err) => {
          entry.done = true;
          entry.error = err instanceof Error ? err : new Error(`load failed: ${err}`);
        },
      );
      pending.push(entry);
      return undefined;
    };
    const runBatch = (batch) => {
      // Answers go in request order: the EOPs of batches loading in the background first.
      if (pending.length && (!batch.length || !maxPending)) return settle(0).then(() => runBatch(batch));
      if (!batch.length) return finish();
      if (maxPending) return loadInBackground(batch);
      const r = handle(batch, batch.batchId);
      if (isT) {
        if (Array.isArray(r)) {
          out.results(r);
          return finish();
        }
        return collect(r).then((all) => {
          out.results(all);
          finish();
        });
      }
      if (isThenable(r)) return r.then(finish); // L: EOP only once the batch is durable
      return finish();
    };

    const parser = new RequestParser(sc.markers);
    const isE = sc.type === 'E';
    const single = !sc.isBatch;
    const workerDriven = sc.workerDriven;
    const batchSize = sc.batchSize;
    let batch = [];
    let cycle = 0;

    // An E-worker's cycle: the commit hook, the extraction, the report, EOP.
    const runCycle = async (token) => {
      const request = new Request(token, cycle);
      // The previous window is done downstream: its offsets may be committed now.
      if (cycle > 0 && typeof w.onWindowDone === 'function') await w.onWindowDone(request);
      await extract(request);
      writeReport(w, sc);
      out.end(eop);
      cycle++;
    };

    // The tokens of a chunk from `from` on, synchronously while the worker's code answers
    // synchronously; at the first promise, returns where to go on once it has settled.
    const step = (tokens, from) => {
      for (let i = from; i < tokens.length; i++) {
        const token = tokens[i];
        let p;
        if (token === EOB) {
          if (isE || single) {
            throw new ProtocolViolation(`EOB received by a ${sc.type}-worker in ${sc.mode} mode`);
          }
          p = runBatch(batch);
          batch = [];
        } else if (isE) {
          p = runCycle(token);
        } else if (single) {
          p = runBatch([token]);
        } else {
          // worker-driven batches (supervisor-driven ones come whole from the parser)
          batch.push(token);
          if (batch.length >= batchSize) {
            p = runBatch(batch);
            batch = [];
          } else if (pending.length) {
            p = settle(0).then(() => out.end(bnc));
          } else {
            out.end(bnc);
          }
        }
        if (p) return { at: i + 1, wait: p };
      }
      return null;
    };

    // Supervisor-driven batches (T or L) come from the parser whole.
    const byBatch = !isE && !single && !workerDriven;
    const ided = sc.batchId && sc.type === 'L' && byBatch; // each batch opens with its id
    const stepBatches = (batches, from) => {
      for (let i = from; i < batches.length; i++) {
        const p = runBatch(ided ? withBatchId(batches[i]) : batches[i]);
        if (p) return { at: i + 1, wait: p };
      }
      return null;
    };
    const next = byBatch ? stepBatches : step;

    const handleChunk = async (chunk) => {
      try {
        const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
        const items = byBatch ? parser.batches(buf) : parser.feed(buf); // batches, or tokens
        for (let more = next(items, 0); more; more = next(items, more.at)) await more.wait;
        if (pending.length) {
          await null; // the reactions of loads that were done at once have run
          ackDone();
        }
      } catch (err) {
        // The answers completed before the failure still go out (the supervisor then
        // sends only the failed request again), never a part of the failed one.
        out.abandon();
        await send();
        throw err;
      }
      await send();
    };

    if (!maxPending) {
      for await (const chunk of input) await handleChunk(chunk);
    } else {
      // While batches load in the background, a read waits on the input and on them:
      // an EOP never waits for input the supervisor only sends after it.
      const it = input[Symbol.asyncIterator]();
      let finished = false;
      try {
        for (;;) {
          const next = it.next();
          let got = null;
          while (!got && pending.length) {
            const first = pending[0];
            got = await Promise.race([next.then((r) => ({ r })), first.promise.then(() => null)]);
            if (!got) {
              try {
                ackDone();
              } catch (err) {
                await send();
                throw err;
              }
              await send();
            }
          }
          const { done, value } = got ? got.r : await next;
          if (done) break;
          await handleChunk(value);
        }
        finished = true;
        try {
          await settle(0);
        } catch (err) {
          await send();
          throw err;
        }
        await send();
      } finally {
        // Not awaited: a read may still be under way, and the caller ends the input.
        if (!finished && typeof it.return === 'function') Promise.resolve(it.return()).catch(() => {});
      }
    }
    const unfinished = byBatch ? parser.open.length : batch.length;
    if (unfinished || parser.pendingBytes) {
      process.stderr.write(
        `${sc.stage}: stdin closed with an unfinished batch (${unfinished} messages, ${parser.pendingBytes} bytes): ` +
          'not processed; the supervisor will send it again\n',
      );
    }
    return 0;
  } finally {
    if (typeof w.teardown === 'function') await w.teardown();
  }
}

/** The exit status for an error that ended serve: 2 configuration, 3 protocol, 1 otherwise. */
function exitStatus(err) {
  if (err instanceof EtlstageError) return err.exitCode;
  return 1;
}

/**
 * Entry point for a worker program: serve on stdin/stdout, errors to stderr, exit status
 * set. Stray console.log output goes to stderr: stdout carries protocol bytes only.
 */
function main(worker, kind) {
  const stdout = process.stdout;
  const write = stdout.write.bind(stdout);
  const toStderr = process.stderr.write.bind(process.stderr);
  stdout.write = (...args) => toStderr(...args); // console.log and libraries too
  const output = { write, once: stdout.once.bind(stdout), off: stdout.off.bind(stdout) };
  stdout.on('error', (err) => {
    process.stderr.write(`the supervisor closed our stdout (${err.code || err.message}); stopping\n`);
    process.exit(1);
  });
  serve(worker, { kind, output }).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      const name = process.argv[1] ? path.basename(process.argv[1]) : 'worker';
      const status = exitStatus(err);
      if (status === 1) process.stderr.write(`${name} failed: ${err && err.stack ? err.stack : err}\n`);
      else process.stderr.write(`${name}: ${err.message}\n`);
      process.exitCode = status;
      process.stdin.destroy();
    },
  );
}

module.exports = {
  serve,
  main,
  exitStatus,
  Request,
  runExtractor: (fn) => main(fn, 'E'),
  runTransformer: (fn) => main(fn, 'T'),
  runLoader: (fn) => main(fn, 'L'),
};
