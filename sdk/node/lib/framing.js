'use strict';
// Framing: the supervisor's bytes -> messages and EOB; results -> one checked block.
const { ProtocolViolation } = require('./scenario');

const EOB = Symbol('EOB');

const snippet = (buf, at) => JSON.stringify(buf.subarray(Math.max(0, at - 24), at + 24).toString('latin1'));
const hex = (b) => '0x' + b.toString(16).padStart(2, '0');

const eobInMessage = (buf, at) =>
  new ProtocolViolation(
    `EOB arrived in the middle of a message (its bytes were not ended by EOM); bytes seen: ${snippet(buf, at)}`,
  );

/** Splits what the supervisor writes into messages (Buffers, EOM removed) and EOB. */
class RequestParser {
  constructor(markers) {
    this.m = markers;
    this.parts = []; // the start of a message, from earlier chunks (copies)
    this.partBytes = 0;
    this.open = []; // batches(): the messages of the batch under way
  }

  get pendingBytes() {
    return this.partBytes;
  }

  /** The tokens completed by `chunk`, in order: Buffers (messages) and EOB. */
  feed(chunk) {
    const { eom, eob } = this.m;
    const out = [];
    let pos = this.begin(chunk, out);
    for (;;) {
      const k = chunk.indexOf(eob, pos);
      const stop = k < 0 ? chunk.length : k;
      let e;
      while ((e = chunk.indexOf(eom, pos)) >= 0 && e < stop) {
        out.push(chunk.subarray(pos, e));
        pos = e + 1;
      }
      if (k < 0) break;
      if (pos < k) throw eobInMessage(chunk, k);
      out.push(EOB);
      pos = k + 1;
    }
    this.keep(chunk, pos);
    return out;
  }

  /**
   * The batches completed by `chunk` (arrays of messages), for supervisor-driven batch
   * mode: the messages go straight into their batch (no token list to go through again);
   * those of the batch under way wait in `open`.
   */
  batches(chunk) {
    const { eom, eob } = this.m;
    const done = [];
    let batch = this.open;
    let pos = this.begin(chunk, batch);
    for (;;) {
      const k = chunk.indexOf(eob, pos);
      const stop = k < 0 ? chunk.length : k;
      let e;
      while ((e = chunk.indexOf(eom, pos)) >= 0 && e < stop) {
        batch.push(chunk.subarray(pos, e));
        pos = e + 1;
      }
      if (k < 0) break;
      if (pos < k) throw eobInMessage(chunk, k);
      done.push(batch);
      batch = [];
      pos = k + 1;
    }
    this.open = batch;
    this.keep(chunk, pos);
    return done;
  }

  /**
   * Checks `chunk` for the markers only a worker writes, and completes the message begun
   * in earlier chunks, if any, with the bytes up to its first EOM (pushed to `into`): the
   * parts are joined, not the whole chunk copied behind them. Returns where the rest of
   * the chunk starts.
   */
  begin(chunk, into) {
    const { eom, eop, eob, bnc } = this.m;
    for (const [byte, name] of [[eop, 'EOP'], [bnc, 'BNC']]) {
      const at = chunk.indexOf(byte);
      if (at >= 0) {
        throw new ProtocolViolation(
          `the supervisor's input holds ${name} (${hex(byte)}), which only a worker may write; bytes seen: ${snippet(chunk, at)}`,
        );
      }
    }
    if (!this.partBytes) return 0;
    const e = chunk.indexOf(eom);
    const head = e < 0 ? chunk : chunk.subarray(0, e);
    const k = head.indexOf(eob);
    if (k >= 0) throw eobInMessage(chunk, k);
    if (e < 0) {
      this.parts.push(Buffer.from(chunk));
      this.partBytes += chunk.length;
      return chunk.length;
    }
    this.parts.push(head);
    into.push(Buffer.concat(this.parts, this.partBytes + e));
    this.parts = [];
    this.partBytes = 0;
    return e + 1;
  }

  /** The bytes from `pos` on, the start of a message, wait for the next chunk. */
  keep(chunk, pos) {
    if (pos < chunk.length) {
      this.parts.push(Buffer.from(chunk.subarray(pos)));
      this.partBytes = chunk.length - pos;
    }
  }
}

const asBuffer = (r) => (Buffer.isBuffer(r) ? r : typeof r === 'string' ? Buffer.from(r, 'utf8') : Buffer.from(r));

/**
 * The answers to one chunk of input, built in one Buffer: results (each followed by EOM),
 * EOP and BNC. Where a marker goes, a placeholder byte (none of the four markers) is
 * written first and its place kept; `take()` looks for each of the four markers in the
 * whole answer at once, where only a result can have put one, then writes the markers in
 * (four searches per chunk, not per result, and no second copy of the results). A
 * result holding a marker is refused: the answers before its own go out, then the error.
 * `abandon()` drops the answer under way when the worker's code fails.
 */
class Reply {
  constructor(markers, stage) {
    this.m = markers;
    this.stage = stage;
    const { eom, eop, eob, bnc } = markers;
    this.hole = [0, 1, 2, 3, 4].find((b) => b !== eom && b !== eop && b !== eob && b !== bnc);
    this.buf = Buffer.allocUnsafe(1 << 16);
    this.len = 0;
    this.eoms = new Int32Array(1 << 10); // where the EOMs go
    this.neom = 0;
    this.ends = new Int32Array(3 << 6); // each complete answer: its end, its EOMs, its marker
    this.nend = 0;
  }

  static grown(buf, used, need) {
    let size = buf.length * 2;
    while (size < used + need) size *= 2;
    const bigger = Buffer.allocUnsafe(size);
    buf.copy(bigger, 0, 0, used);
    return bigger;
  }

  static longer(ints) {
    const more = new Int32Array(ints.length * 2);
    more.set(ints);
    return more;
  }

  /** Results: Buffers, Uint8Arrays or strings (UTF-8). */
  results(results) {
    for (const r of results) this.result(r);
  }

  result(r) {
    if (!(r instanceof Uint8Array)) r = asBuffer(r);
    const n = r.length;
    if (this.len + n + 1 > this.buf.length) this.buf = Reply.grown(this.buf, this.len, n + 1);
    if (this.neom === this.eoms.length) this.eoms = Reply.longer(this.eoms);
    this.buf.set(r, this.len);
    this.len += n;
    this.eoms[this.neom++] = this.len;
    this.buf[this.len++] = this.hole;
  }

  /** EOP or BNC: the answer under way is complete. */
  end(marker) {
    if (this.len + 1 > this.buf.length) this.buf = Reply.grown(this.buf, this.len, 1);
    if (this.nend + 3 > this.ends.length) this.ends = Reply.longer(this.ends);
    this.buf[this.len++] = this.hole;
    this.ends[this.nend++] = this.len;
    this.ends[this.nend++] = this.neom;
    this.ends[this.nend++] = marker;
  }

  /** The worker's code failed: drop what it wrote of the answer under way. */
  abandon() {
    const n = this.nend;
    this.len = n ? this.ends[n - 3] : 0;
    this.neom = n ? this.ends[n - 2] : 0;
  }

  /**
   * The answers built so far, checked, to be written; the next ones go to a new buffer.
   * Returns [answers, error]: a result holding a marker leaves out its answer and what
   * follows, and is the error.
   */
  take() {
    const { buf, len, eoms, neom, ends, nend } = this;
    let error = null;
    let keep = len;
    if (len) {
      const { eom, eop, eob, bnc } = this.m;
      const all = buf.subarray(0, len);
      let cut = -1; // the first marker byte in a result
      let name;
      for (const [byte, n] of [[eom, 'EOM'], [eop, 'EOP'], [eob, 'EOB'], [bnc, 'BNC']]) {
        const k = all.indexOf(byte);
        if (k >= 0 && (cut < 0 || k < cut)) {
          cut = k;
          name = n;
        }
      }
      for (let i = 0; i < neom; i++) buf[eoms[i]] = eom;
      for (let i = 0; i < nend; i += 3) buf[ends[i] - 1] = ends[i + 2];
      if (cut >= 0) {
        let i = 0; // the answers that end before the culprit
        while (i < nend && ends[i] <= cut) i += 3;
        keep = i ? ends[i - 3] : 0;
        let from = keep; // the culprit: after the marker before it, up to the EOM after it
        let to = len;
        for (let j = i ? ends[i - 2] : 0; j < neom; j++) {
          if (eoms[j] > cut) {
            to = eoms[j];
            break;
          }
          from = eoms[j] + 1;
        }
        const result = buf.subarray(from, to);
        error = new ProtocolViolation(
          `a result of stage '${this.stage}' contains its ${name} marker ${hex(buf[cut])}: ` +
            `${snippet(result, cut - from)}; messages must not contain marker bytes (choose other markers, or encode the data)`,
        );
      }
    }
    const out = buf.subarray(0, keep);
    if (len) this.buf = Buffer.allocUnsafe(Math.max(1 << 16, len + (len >> 2)));
    this.len = this.neom = this.nend = 0;
    return [out, error];
  }
}

module.exports = { RequestParser, Reply, EOB };
