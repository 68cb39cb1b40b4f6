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
 * The answers to one chunk of input, built in one Buffer: results (each followed by EOM),
 * EOP and BNC. Every result is also copied to a scratch buffer, so `take()` looks for the
 * four markers in all the results of the chunk at once (four searches per chunk, not per
 * result). A result holding a marker is refused: the answers before its own go out, then
 * the error. `abandon()` drops the answer under way when the worker's code fails.
 */
class Reply {
  constructor(markers, stage) {
    this.m = markers;
    this.stage = stage;
    this.buf = Buffer.allocUnsafe(1 << 16);
    this.len = 0;
    this.scratch = Buffer.allocUnsafe(1 << 16);
    this.slen = 0;
    this.ends = []; // for each complete answer: where it ends in buf, then in scratch
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
    for (const r of results) this.result(r);
  }

  result(r) {
    if (!(r instanceof Uint8Array)) r = asBuffer(r);
    const n = r.length;
    if (this.len + n + 1 > this.buf.length) this.buf = Reply.grown(this.buf, this.len, n + 1);
    if (this.slen + n > this.scratch.length) this.scratch = Reply.grown(this.scratch, this.slen, n);
    this.buf.set(r, this.len);
    this.scratch.set(r, this.slen);
    this.len += n;
    this.slen += n;
    this.buf[this.len++] = this.m.eom;
  }

  /** EOP or BNC: the answer under way is complete. */
  end(marker) {
    if (this.len + 1 > this.buf.length) this.buf = Reply.grown(this.buf, this.len, 1);
    this.buf[this.len++] = marker;
    this.ends.push(this.len, this.slen);
  }

  /** The worker's code failed: drop what it wrote of the answer under way. */
  abandon() {
    const { ends } = this;
    this.len = ends.length ? ends[ends.length - 2] : 0;
    this.slen = ends.length ? ends[ends.length - 1] : 0;
  }

  /**
   * The answers built so far, checked, to be written; the next ones go to a new buffer.
   * Returns [answers, error]: a result holding a marker leaves out its answer and what
   * follows, and is the error.
   */
  take() {
    let error = null;
    if (this.slen) {
      const all = this.scratch.subarray(0, this.slen);
      const { eom, eop, eob, bnc } = this.m;
      for (const [byte, name] of [[eom, 'EOM'], [eop, 'EOP'], [eob, 'EOB'], [bnc, 'BNC']]) {
        const k = all.indexOf(byte);
        if (k >= 0 && !error) {
          error = new ProtocolViolation(
            `a result of stage '${this.stage}' contains its ${name} marker ${hex(byte)}: ${snippet(all, k)}; ` +
              'messages must not contain marker bytes (choose other markers, or encode the data)',
          );
          let i = 0; // the answers that end before the culprit's bytes
          while (i < this.ends.length && this.ends[i + 1] <= k) i += 2;
          this.len = i ? this.ends[i - 2] : 0;
        }
      }
    }
    const out = this.buf.subarray(0, this.len);
    if (this.len) this.buf = Buffer.allocUnsafe(Math.max(1 << 16, this.len + (this.len >> 2)));
    this.len = this.slen = 0;
    this.ends.length = 0;
    return [out, error];
  }
}

module.exports = { RequestParser, Reply, EOB };
