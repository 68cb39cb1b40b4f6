package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"etlstage/worker"
)

const (
	firstID = "0123456789abcdef0123456789abcdef"
	otherID = "fedcba9876543210fedcba9876543210"
)

var ctx = context.Background()

func testDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rows.db")
	db, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func insertLines(lines ...string) func(*sql.Tx) error {
	return func(tx *sql.Tx) error {
		for _, l := range lines {
			if _, err := tx.Exec("INSERT INTO lines (line) VALUES (?)", l); err != nil {
				return err
			}
		}
		return nil
	}
}

func column(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	return got
}

func expect(t *testing.T, db *sql.DB, lines, ids []string) {
	t.Helper()
	if got := column(t, db, "SELECT line FROM lines ORDER BY rowid"); !reflect.DeepEqual(got, lines) {
		t.Fatalf("lines %q, want %q", got, lines)
	}
	if got := column(t, db, "SELECT id FROM etlstage_batches ORDER BY id"); !reflect.DeepEqual(got, ids) {
		t.Fatalf("ids %q, want %q", got, ids)
	}
}

func commit(t *testing.T, s *worker.SQLSink, id string, insert func(*sql.Tx) error, want bool) {
	t.Helper()
	if loaded, err := s.Commit(ctx, id, insert); err != nil || loaded != want {
		t.Fatalf("Commit(%s): %v, %v; want %v", id, loaded, err, want)
	}
}

func TestABatchIsLoadedOnceAFailedOneNotAtAll(t *testing.T) {
	db, _ := testDB(t)
	s := &worker.SQLSink{DB: db}
	commit(t, s, firstID, insertLines("a", "b"), true)
	ran := false
	commit(t, s, firstID, func(*sql.Tx) error { ran = true; return nil }, false) // sent again: skipped
	if ran {
		t.Fatal("the insert of a batch whose id is recorded ran")
	}
	expect(t, db, []string{"a", "b"}, []string{firstID})

	boom := errors.New("boom")
	failing := func(tx *sql.Tx) error {
		if err := insertLines("c")(tx); err != nil {
			return err
		}
		return boom
	}
	if loaded, err := s.Commit(ctx, otherID, failing); loaded || !errors.Is(err, boom) {
		t.Fatalf("a failing insert: %v, %v", loaded, err)
	}
	expect(t, db, []string{"a", "b"}, []string{firstID}) // neither its row nor its id

	commit(t, s, otherID, insertLines("c", "d"), true) // after the failure, loaded whole
	expect(t, db, []string{"a", "b", "c", "d"}, []string{firstID, otherID})
	if done, err := s.Committed(ctx, otherID); !done || err != nil {
		t.Fatalf("Committed: %v, %v", done, err)
	}
}

func TestAPanickingInsertRollsBack(t *testing.T) {
	db, _ := testDB(t)
	s := &worker.SQLSink{DB: db}
	func() {
		defer func() { recover() }()
		s.Commit(ctx, firstID, func(tx *sql.Tx) error { insertLines("a")(tx); panic("boom") })
	}()
	commit(t, s, firstID, insertLines("b"), true)
	expect(t, db, []string{"b"}, []string{firstID})
}

// A failed commit rolls back before it looks the id up again: on a pool of one
// connection (as many SQLite users set), it does not wait for its own transaction.
func TestAFailedCommitOnOneConnectionReturns(t *testing.T) {
	db, _ := testDB(t)
	db.SetMaxOpenConns(1)
	s := &worker.SQLSink{DB: db}
	timed, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	boom := errors.New("boom")
	if loaded, err := s.Commit(timed, firstID, func(*sql.Tx) error { return boom }); loaded || !errors.Is(err, boom) || timed.Err() != nil {
		t.Fatalf("%v, %v (the deadline: %v)", loaded, err, timed.Err())
	}
}

func TestWithoutAnIDNothingIsLoaded(t *testing.T) {
	db, _ := testDB(t)
	s := &worker.SQLSink{DB: db}
	if loaded, err := s.Commit(ctx, "", insertLines("a")); loaded || !errors.Is(err, worker.ErrNoBatchID) {
		t.Fatalf("%v, %v", loaded, err)
	}
}

// The table and the placeholder are the user's to name (a PostgreSQL user writes "$1").
func TestTheTableAndStatementsAreConfigurable(t *testing.T) {
	db, _ := testDB(t)
	s := &worker.SQLSink{DB: db, Table: "loaded_batches", Placeholder: "$1"} // SQLite takes $1 too
	commit(t, s, firstID, insertLines("a"), true)
	commit(t, s, firstID, insertLines("a"), false)
	if got := column(t, db, "SELECT id FROM loaded_batches"); !reflect.DeepEqual(got, []string{firstID}) {
		t.Fatalf("ids %q", got)
	}
}

// Under PostgreSQL's READ COMMITTED two loaders of one batch may both find its id absent:
// the id's primary key still refuses the second. A lookup that never finds the id stands
// for that race here: the second commit fails, its rows rolled back.
func TestThePrimaryKeyRefusesASecondLoadTheLookupMissed(t *testing.T) {
	db, _ := testDB(t)
	blind := &worker.SQLSink{DB: db, Lookup: "SELECT 1 FROM etlstage_batches WHERE id = ? AND 0"}
	commit(t, blind, firstID, insertLines("a"), true)
	if loaded, err := blind.Commit(ctx, firstID, insertLines("a")); loaded || err == nil {
		t.Fatalf("the second load of the id: %v, %v", loaded, err)
	}
	expect(t, db, []string{"a"}, []string{firstID})
}

// Two loaders (two connections) commit the same batch at once: both find its id absent,
// the first commits, the second's transaction fails (SQLite: its snapshot is stale) and
// rolls back, and it reports the batch skipped, since the id is recorded now.
func TestTwoLoadersOfOneBatchAtOnceLoadItOnce(t *testing.T) {
	first, path := testDB(t)
	second, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	a, b := &worker.SQLSink{DB: first}, &worker.SQLSink{DB: second}
	if _, err := b.Committed(ctx, firstID); err != nil { // the table is there before the race
		t.Fatal(err)
	}

	aInserted, bLookedUp, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	type result struct {
		loaded bool
		err    error
	}
	aResult := make(chan result, 1)
	go func() {
		loaded, err := a.Commit(ctx, firstID, func(tx *sql.Tx) error {
			err := insertLines("a")(tx)
			close(aInserted)
			<-bLookedUp // b has found the id absent too
			return err
		})
		aResult <- result{loaded, err}
		close(aDone)
	}()
	<-aInserted
	loaded, err := b.Commit(ctx, firstID, func(tx *sql.Tx) error {
		close(bLookedUp)
		<-aDone
		return insertLines("a")(tx)
	})
	if r := <-aResult; !r.loaded || r.err != nil {
		t.Fatalf("the first loader: %v, %v", r.loaded, r.err)
	}
	if loaded || err != nil {
		t.Fatalf("the second loader: %v, %v; want skipped", loaded, err)
	}
	expect(t, first, []string{"a"}, []string{firstID})
}

// The example worker through the SDK's protocol loop: a batch sent again (as after a
// crash, to a new process) with its id is not loaded twice.
func TestTheExampleLoadsABatchSentAgainOnce(t *testing.T) {
	db, path := testDB(t)
	env := map[string]string{"ETLSTAGE_TYPE": "L", "ETLSTAGE_MODE": "batch", "ETLSTAGE_BATCH_SIZE": "2", "ETLSTAGE_BATCH_ID": "1"}
	batch := func(id string, lines ...string) string {
		return "etlstage-batch-id " + id + "\n" + strings.Join(lines, "\n") + "\n\x17"
	}
	for _, in := range []string{batch(firstID, "a", "b"), batch(firstID, "a", "b") + batch(otherID, "c")} {
		l := &loader{}
		var out bytes.Buffer
		if err := worker.Serve(&withDB{l, path}, strings.NewReader(in), &out, func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, db, []string{"a", "b", "c"}, []string{firstID, otherID})
}

// withDB: the example loader on the test's database (its Setup reads the path from os.Args).
type withDB struct {
	*loader
	path string
}

func (w *withDB) Setup(worker.Scenario) error {
	db, err := open(w.path)
	w.rows = &worker.SQLSink{DB: db}
	return err
}
