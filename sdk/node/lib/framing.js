'use strict';
// Framing: the supervisor's bytes -> messages and EOB; results -> one checked block.
const { ProtocolViolation } = require('./scenario');

const EOB = Symbol('EOB');

const snippet = (buf, at) => JSON.stringify(buf.subarray(Math.max(0, at - 24), at + 24).toString('latin1'));
const hex = (b) => '0x' + b.toString(16).padStart(2, '0');

/** Splits what the supervisor writes into messages (Buffers, EOM removed) and EOB. */
class RequestParser {
  constructor(markers) {
    this.m = markers;
    this.tail = null;
  }

  get pendingBytes() {
    return this.tail ? this.tail.length : 0;
  }

  /** The tokens completed by `chunk`, in order: Buffers (messages) and EOB. */
  feed(chunk) {
    const { eom, eob, eop, bnc } = this.m;
    for (const [byte, name] of [[eop, 'EOP'], [bnc, 'BNC']]) {
      const at = chunk.indexOf(byte);
      if (at >= 0) {
        throw new ProtocolViolation(
          `the supervisor's input holds ${name} (${hex(byte)}), which only a worker may write; bytes seen: ${snippet(chunk, at)}`,
        );
      }
    }
    const buf = this.tail ? Buffer.concat([this.tail, chunk]) : chunk;
    this.tail = null;
    const out = [];
    let pos = 0;
    for (;;) {
      const k = buf.indexOf(eob, pos);
      const stop = k < 0 ? buf.length : k;
      let e;
      while ((e = buf.indexOf(eom, pos)) >= 0 && e < stop) {
        out.push(buf.subarray(pos, e));
        pos = e + 1;
      }
      if (k < 0) {
        if (pos < buf.length) this.tail = Buffer.from(buf.subarray(pos));
        return out;
      }
      if (pos < k) {
        throw new ProtocolViolation(
          `EOB arrived in the middle of a message (its bytes were not ended by EOM); bytes seen: ${snippet(buf, k)}`,
        );
      }
      out.push(EOB);
      pos = k + 1;
    }
  }
}

const asBuffer = (r) => (Buffer.isBuffer(r) ? r : typeof r === 'string' ? Buffer.from(r, 'utf8') : Buffer.from(r));

/**
 * Results as one block, each followed by EOM; a result holding one of the stage's
 * markers is refused (the worker fails rather than desynchronise the stream).
 * `results`: Buffers, Uint8Arrays or strings (UTF-8).
 */
function encodeBlock(results, markers, stage) {
  const { eom, eop, eob, bnc } = markers;
  const bufs = new Array(results.length);
  let size = 0;
  for (let i = 0; i < results.length; i++) {
    const b = asBuffer(results[i]);
    bufs[i] = b;
    size += b.length + 1;
    if (b.indexOf(eom) >= 0) {
      throw new ProtocolViolation(`result #${i} for stage '${stage}' contains the EOM marker ${hex(eom)}`);
    }
  }
  const block = Buffer.allocUnsafe(size);
  let at = 0;
  for (const b of bufs) {
    at += b.copy(block, at);
    block[at++] = eom;
  }
  for (const [byte, name] of [[eop, 'EOP'], [eob, 'EOB'], [bnc, 'BNC']]) {
    const k = block.indexOf(byte);
    if (k >= 0) {
      throw new ProtocolViolation(
        `a result of stage '${stage}' contains its ${name} marker ${hex(byte)} at byte ${k} of the block; ` +
          'messages must not contain marker bytes (choose other markers, or encode the data)',
      );
    }
  }
  return block;
}

/**
 * The answers to one chunk of input, built in one Buffer: results (each followed by EOM),
 * EOP and BNC. Every result is also copied to a scratch buffer, so `check()` looks for
 * the four markers in all the results of the chunk at once (four searches per chunk, not
 * per result); a result holding a marker is refused and nothing of the chunk is written.
 */
class Reply {
  constructor(markers, stage) {
    this.m = markers;
    this.stage = stage;
    this.buf = Buffer.allocUnsafe(1 << 16);
    this.len = 0;
    this.scratch = Buffer.allocUnsafe(1 << 16);
    this.slen = 0;
  }

  static grown(buf, used, need) {
    let size = buf.length * 2;
    while (size < used + need) size *= 2;
    const bigger = Buffer.allocUnsafe(size);
    buf.copy(bigger, 0, 0, used);
    return bigger;
  }

  /** Results: Buffers, Uint8Arrays or strings (UTF-8). */
  results(results) {
    const eom = this.m.eom;
    for (let r of results) {
      if (!(r instanceof Uint8Array)) r = asBuffer(r);
      const n = r.length;
      if (this.len + n + 1 > this.buf.length) this.buf = Reply.grown(this.buf, this.len, n + 1);
      if (this.slen + n > this.scratch.length) this.scratch = Reply.grown(this.scratch, this.slen, n);
      this.buf.set(r, this.len);
      this.scratch.set(r, this.slen);
      this.len += n;
      this.slen += n;
      this.buf[this.len++] = eom;
    }
  }

  byte(b) {
    if (this.len + 1 > this.buf.length) this.buf = Reply.grown(this.buf, this.len, 1);
    this.buf[this.len++] = b;
  }

  check() {
    if (!this.slen) return;
    const all = this.scratch.subarray(0, this.slen);
    this.slen = 0;
    const { eom, eop, eob, bnc } = this.m;
    for (const [byte, name] of [[eom, 'EOM'], [eop, 'EOP'], [eob, 'EOB'], [bnc, 'BNC']]) {
      const k = all.indexOf(byte);
      if (k >= 0) {
        this.len = 0;
        throw new ProtocolViolation(
          `a result of stage '${this.stage}' contains its ${name} marker ${hex(byte)}: ${snippet(all, k)}; ` +
            'messages must not contain marker bytes (choose other markers, or encode the data)',
        );
      }
    }
  }

  /** The answers built so far, checked, to be written; the next ones go to a new buffer. */
  take() {
    this.check();
    const out = this.buf.subarray(0, this.len);
    if (this.len) {
      this.buf = Buffer.allocUnsafe(Math.max(1 << 16, this.len + (this.len >> 2)));
      this.len = 0;
    }
    return out;
  }
}

module.exports = { RequestParser, Reply, encodeBlock, EOB };
