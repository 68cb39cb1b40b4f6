'use strict';
// SqlSink against a real SQLite engine: sql.js (SQLite's own C source compiled to
// WebAssembly; a development dependency only, the SDK needs no package at run time).
const test = require('node:test');
const assert = require('node:assert');
const initSqlJs = require('sql.js');
const { SqlSink } = require('..');

const FIRST = '0123456789abcdef0123456789abcdef';
const OTHER = 'fedcba9876543210fedcba9876543210';

let SQL;
test.before(async () => {
  SQL = await initSqlJs();
});

/** A database with a `lines` table, and the two verbs SqlSink takes (async, as most drivers' are). */
function database() {
  const db = new SQL.Database();
  db.run('CREATE TABLE lines (line TEXT NOT NULL)');
  const verbs = {
    run: async (q, params = []) => {
      db.run(q, params);
    },
    get: async (q, params = []) => {
      const st = db.prepare(q);
      try {
        st.bind(params);
        return st.step() ? st.getAsObject() : undefined;
      } finally {
        st.free();
      }
    },
  };
  const column = (q) => (db.exec(q)[0]?.values ?? []).map((row) => row[0]);
  const insert = (...lines) => async () => {
    for (const l of lines) await verbs.run('INSERT INTO lines (line) VALUES (?)', [l]);
  };
  return { db, verbs, column, insert };
}

function expect(d, lines, ids, table = 'etlstage_batches') {
  assert.deepStrictEqual(d.column('SELECT line FROM lines ORDER BY rowid'), lines);
  assert.deepStrictEqual(d.column(`SELECT id FROM ${table} ORDER BY id`), ids);
}

test('a batch is loaded once, a failed one not at all', async () => {
  const d = database();
  const sink = new SqlSink(d.verbs);
  assert.strictEqual(await sink.commit(FIRST, d.insert('a', 'b')), true);
  let ran = false;
  const again = await sink.commit(FIRST, async () => {
    ran = true;
  });
  assert.strictEqual(again, false, 'sent again: skipped');
  assert.strictEqual(ran, false, 'the insert of a batch whose id is recorded ran');
  expect(d, ['a', 'b'], [FIRST]);

  const boom = new Error('boom');
  await assert.rejects(
    sink.commit(OTHER, async () => {
      await d.insert('c')();
      throw boom;
    }),
    (err) => err === boom,
  );
  expect(d, ['a', 'b'], [FIRST]); // neither its row nor its id

  assert.strictEqual(await sink.commit(OTHER, d.insert('c', 'd')), true); // after the failure, loaded whole
  expect(d, ['a', 'b', 'c', 'd'], [FIRST, OTHER]);
  assert.strictEqual(await sink.committed(OTHER), true);
  assert.strictEqual(await sink.committed('00000000000000000000000000000000'), false);
});

test('without an id nothing is loaded, and the error names the stage key', async () => {
  const d = database();
  const sink = new SqlSink(d.verbs);
  await assert.rejects(sink.commit('', d.insert('a')), /batch_id: true/);
  assert.deepStrictEqual(d.column('SELECT line FROM lines'), []);
});

test('the table and the placeholder are the user\'s to name', async () => {
  const d = database();
  const sink = new SqlSink({ ...d.verbs, table: 'loaded_batches', placeholder: '$1' }); // SQLite takes $1 too
  assert.strictEqual(await sink.commit(FIRST, d.insert('a')), true);
  assert.strictEqual(await sink.commit(FIRST, d.insert('a')), false);
  expect(d, ['a'], [FIRST], 'loaded_batches');
});

test('synchronous verbs work too (better-sqlite3 is synchronous)', async () => {
  const d = database();
  const sink = new SqlSink({
    run: (q, p = []) => d.db.run(q, p),
    get: (q, p = []) => d.db.exec(q, p)[0]?.values[0],
  });
  assert.strictEqual(await sink.commit(FIRST, () => d.db.run("INSERT INTO lines VALUES ('a')")), true);
  assert.strictEqual(await sink.commit(FIRST, () => d.db.run("INSERT INTO lines VALUES ('a')")), false);
  expect(d, ['a'], [FIRST]);
});

// Under PostgreSQL's READ COMMITTED two loaders of one batch may both find its id absent:
// the id's primary key still refuses the second. A lookup that never finds the id stands
// for that race here: the second commit fails, its rows rolled back.
test('the primary key refuses a second load the lookup missed', async () => {
  const d = database();
  const blind = new SqlSink({ ...d.verbs, lookup: 'SELECT 1 AS one FROM etlstage_batches WHERE id = ? AND 0' });
  assert.strictEqual(await blind.commit(FIRST, d.insert('a')), true);
  await assert.rejects(blind.commit(FIRST, d.insert('a')), /UNIQUE|PRIMARY|constraint/i);
  expect(d, ['a'], [FIRST]);
});

// The race as the losing loader sees it: its transaction fails (a lock, or the id's key)
// because another loader is committing the same batch, whose commit lands while ours rolls
// back. The id being recorded then, the batch is reported skipped, not failed.
test('a batch another loader committed meanwhile is reported skipped', async () => {
  const d = database();
  await new SqlSink(d.verbs).committed(FIRST); // the table is there
  const losing = new SqlSink({
    ...d.verbs,
    run: async (q, p) => {
      await d.verbs.run(q, p);
      if (q === 'ROLLBACK') d.db.run('INSERT INTO etlstage_batches (id) VALUES (?)', [FIRST]); // the winner's commit
    },
  });
  const loaded = await losing.commit(FIRST, async () => {
    await d.insert('a')();
    throw new Error('database is locked');
  });
  assert.strictEqual(loaded, false);
  expect(d, [], [FIRST]); // the loser's rows rolled back

  // and a failure with no such commit meanwhile is the loader's error to see
  const alone = new SqlSink(d.verbs);
  await assert.rejects(
    alone.commit(OTHER, async () => {
      throw new Error('database is locked');
    }),
    /locked/,
  );
});

test('the connection\'s verbs are required', () => {
  assert.throws(() => new SqlSink({}), /run\(sql, params\) and get\(sql, params\)/);
});
