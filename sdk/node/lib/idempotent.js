'use strict';
/**
 * Idempotent loaders: commit each batch with its id, skip an id committed before.
 *
 * A stage with `batch_id: true` passes each batch's id as load's second argument: the
 * same whenever the same messages are sent again, never the same for other messages
 * (docs/protocol.md: batch ids). FileSink writes each batch to one file named after its
 * id — a temporary file, fsynced, renamed, the folder fsynced — so a file is there whole
 * or not at all, and a batch whose file is there is not written again. SqlSink inserts the
 * batch's rows and its id in one database transaction.
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

/**
 * Commits each batch's rows and its id in one SQL transaction: a batch whose id is
 * recorded is not loaded again.
 *
 * Node.js has no standard database interface, so the sink is given the connection's two
 * verbs, each of which may return a promise:
 *
 *   run(sql, params)   runs a statement;
 *   get(sql, params)   the first row a query returns, or undefined.
 *
 * better-sqlite3:  { run: (q, p = []) => db.prepare(q).run(...p), get: (q, p = []) => db.prepare(q).get(...p) }
 * pg (a Client):   { run: (q, p) => client.query(q, p), get: async (q, p) => (await client.query(q, p)).rows[0],
 *                    placeholder: '$1' }
 *
 * The ids go into `table` (default etlstage_batches, created before the first commit and
 * outside its transaction: MySQL commits a transaction at any CREATE TABLE). `begin` opens
 * the transaction ('BEGIN IMMEDIATE' on SQLite takes the write lock at once). One commit
 * at a time per connection: the SDK awaits each batch's load before the next.
 *
 * Two loaders committing the same id at once do not both load it: the id's primary key
 * (or the database's locks) fails the second one's transaction, which rolls back; the id
 * then being recorded, commit reports that batch skipped (false), as it would have had
 * the second loader come after the first.
 */
class SqlSink {
  constructor({ run, get, table = 'etlstage_batches', placeholder = '?', begin = 'BEGIN', create, lookup, record }) {
    if (typeof run !== 'function' || typeof get !== 'function') {
      throw new TypeError('SqlSink needs the connection\'s run(sql, params) and get(sql, params) functions');
    }
    this.run = run;
    this.get = get;
    this.begin = begin;
    // VARCHAR, not TEXT: MySQL takes no TEXT column as a key; '-': create nothing
    this.create = create ?? `CREATE TABLE IF NOT EXISTS ${table} (id VARCHAR(64) PRIMARY KEY)`;
    this.lookup = lookup ?? `SELECT 1 AS one FROM ${table} WHERE id = ${placeholder}`;
    this.record = record ?? `INSERT INTO ${table} (id) VALUES (${placeholder})`;
    this.created = false;
  }

  async ensureTable() {
    if (this.create === '-' || this.created) return;
    await this.run(this.create, []);
    this.created = true;
  }

  /** Whether the id is recorded. */
  async committed(batchId) {
    await this.ensureTable();
    return (await this.get(this.lookup, [batchId])) !== undefined;
  }

  /**
   * Runs `insert()` (which writes the batch's rows through the same connection) and records
   * the id in one transaction, then commits: true. When the id is recorded already, nothing
   * runs and nothing changes: false. An error from insert, from recording the id or from
   * the commit rolls everything back and is thrown (unless the id turns out recorded by
   * another loader meanwhile: false).
   */
  async commit(batchId, insert) {
    if (!batchId) throw new Error(NO_ID);
    await this.ensureTable();
    await this.run(this.begin, []);
    try {
      if ((await this.get(this.lookup, [batchId])) !== undefined) {
        await this.run('ROLLBACK', []);
        return false;
      }
      await insert();
      await this.run(this.record, [batchId]);
      await this.run('COMMIT', []);
      return true;
    } catch (err) {
      try {
        await this.run('ROLLBACK', []);
      } catch {
        // no transaction left to roll back (the failed COMMIT ended it)
      }
      // A concurrent loader of the same batch committed first: its id's primary key (or a
      // lock) failed ours. The batch is loaded once, as if ours had come second.
      let recorded = false;
      try {
        recorded = (await this.get(this.lookup, [batchId])) !== undefined;
      } catch {
        // the lookup failing too: the first error is the one to tell
      }
      if (recorded) return false;
      throw err;
    }
  }
}

module.exports = { FileSink, SqlSink, NO_ID };
