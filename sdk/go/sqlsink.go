package worker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
)

// SQLSink commits each batch's rows and its id in one database/sql transaction: a batch
// whose id is recorded is not loaded again. It works with any driver: open the *sql.DB
// yourself (the SDK imports none).
//
// The ids go into Table (default "etlstage_batches", created when missing, before the
// first commit and outside its transaction, since MySQL commits a transaction at any
// CREATE TABLE). The statements take the id as their one parameter, written Placeholder:
// "?" by default (SQLite, MySQL), "$1" for PostgreSQL, "@p1" for SQL Server; or give the
// statements themselves (Create "" creates the default table, "-" nothing).
//
// Two loaders committing the same id at once do not both load it: the id's primary key
// (or the database's locks) fails the second one's transaction, which rolls back; the
// id then being recorded, Commit reports that batch skipped (false, nil), as it would
// have had the second loader come after the first.
type SQLSink struct {
	DB          *sql.DB
	Table       string // default "etlstage_batches"
	Placeholder string // the id's parameter in Lookup and Record: default "?"

	Create string // default "CREATE TABLE IF NOT EXISTS <Table> (id VARCHAR(64) PRIMARY KEY)"; "-": none
	Lookup string // default "SELECT 1 FROM <Table> WHERE id = <Placeholder>"
	Record string // default "INSERT INTO <Table> (id) VALUES (<Placeholder>)"

	created atomic.Bool
}

func (s *SQLSink) statements() (create, lookup, record string) {
	table, param := s.Table, s.Placeholder
	if table == "" {
		table = "etlstage_batches"
	}
	if param == "" {
		param = "?"
	}
	create, lookup, record = s.Create, s.Lookup, s.Record
	if create == "" {
		// VARCHAR, not TEXT: MySQL takes no TEXT column as a key
		create = fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (id VARCHAR(64) PRIMARY KEY)", table)
	}
	if lookup == "" {
		lookup = fmt.Sprintf("SELECT 1 FROM %s WHERE id = %s", table, param)
	}
	if record == "" {
		record = fmt.Sprintf("INSERT INTO %s (id) VALUES (%s)", table, param)
	}
	return create, lookup, record
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func recorded(ctx context.Context, q querier, lookup, id string) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, lookup, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Committed: whether the id is recorded.
func (s *SQLSink) Committed(ctx context.Context, id string) (bool, error) {
	if err := s.ensureTable(ctx); err != nil {
		return false, err
	}
	_, lookup, _ := s.statements()
	return recorded(ctx, s.DB, lookup, id)
}

func (s *SQLSink) ensureTable(ctx context.Context) error {
	create, _, _ := s.statements()
	if create == "-" || s.created.Load() {
		return nil
	}
	if _, err := s.DB.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("creating the batch ids table: %w", err)
	}
	s.created.Store(true)
	return nil
}

// Commit runs insert and records batchID in one transaction, then commits it: true. When
// the id is recorded already, nothing runs and nothing changes: false. An error from
// insert, from recording the id or from the commit rolls everything back and is returned
// (unless the id turns out recorded by another loader meanwhile: false, nil).
func (s *SQLSink) Commit(ctx context.Context, batchID string, insert func(tx *sql.Tx) error) (bool, error) {
	if batchID == "" {
		return false, ErrNoBatchID
	}
	if err := s.ensureTable(ctx); err != nil {
		return false, err
	}
	_, lookup, record := s.statements()
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() // a no-op once committed; undoes a panicking insert
	done, err := recorded(ctx, tx, lookup, batchID)
	if err == nil && done {
		return false, nil
	}
	if err == nil {
		err = insert(tx)
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, record, batchID)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err == nil {
		return true, nil
	}
	tx.Rollback()
	// A concurrent loader of the same batch committed first: its id's primary key (or a
	// lock) failed ours. The batch is loaded once, as if ours had come second.
	if done, e := recorded(ctx, s.DB, lookup, batchID); e == nil && done {
		return false, nil
	}
	return false, err
}
