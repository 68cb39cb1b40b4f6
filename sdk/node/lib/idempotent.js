'use strict';
/**
 * Idempotent loaders: commit each batch with its id, skip an id committed before.
 *
 * A stage with `batch_id: true` passes each batch's id as load's second argument: the
 * same whenever the same messages are sent again, never the same for other messages
 * (docs/protocol.md: batch ids). FileSink writes each batch to one file named after its
 * id — a temporary file, fsynced, renamed, the folder fsynced — so a file is there whole
 * or not at all, and a batch whose file is there is not written again.
 */
const fs = require('node:fs');
const path = require('node:path');

const NO_ID =
  'this loader commits each batch with its id, but the batch came without one: ' +
  'give the stage `batch_id: true` (L-stage, mode: batch) in stages.yaml';

class FileSink {
  constructor(folder, { prefix = 'batch-', suffix = '.txt', separator = '\n' } = {}) {
    this.folder = folder;
    this.prefix = prefix;
    this.suffix = suffix;
    this.separator = Buffer.from(separator);
    fs.mkdirSync(folder, { recursive: true });
  }

  path(batchId) {
    return path.join(this.folder, `${this.prefix}${batchId}${this.suffix}`);
  }

  committed(batchId) {
    return fs.existsSync(this.path(batchId));
  }

  /** Writes the batch's file atomically; false (nothing written) when it is there already. */
  commit(batchId, messages) {
    if (!batchId) throw new Error(NO_ID);
    const final = this.path(batchId);
    if (fs.existsSync(final)) return false;
    const tmp = path.join(this.folder, `.tmp-${process.pid}-${batchId}`);
    const parts = [];
    for (const m of messages) parts.push(Buffer.isBuffer(m) ? m : Buffer.from(String(m)), this.separator);
    const fd = fs.openSync(tmp, 'w');
    try {
      fs.writeSync(fd, Buffer.concat(parts));
      fs.fsyncSync(fd);
    } catch (err) {
      fs.closeSync(fd);
      fs.rmSync(tmp, { force: true });
      throw err;
    }
    fs.closeSync(fd);
    fs.renameSync(tmp, final);
    const dir = fs.openSync(this.folder, 'r');
    try {
      fs.fsyncSync(dir); // the rename itself is durable
    } finally {
      fs.closeSync(dir);
    }
    return true;
  }
}

module.exports = { FileSink, NO_ID };
