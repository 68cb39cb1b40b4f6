// sqlsink: an idempotent L-worker with the etlstage Go SDK, for a stage with `mode: batch`
// and `batch_id: true`: each batch's messages become rows of the table `lines` in a
// SQLite database (default $ETLSTAGE_STATE_DIR/sqlsink-<instance>.db), inserted in one
// transaction with the batch's id by worker.SQLSink. A batch sent again after a crash
// keeps its id, finds it recorded and is not loaded twice. Reports {"loaded": N}.
//
// Usage: sqlsink [DB]
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"etlstage/worker"
	_ "github.com/glebarez/go-sqlite" // any database/sql driver does
)

type loader struct {
	rows   *worker.SQLSink
	loaded int
}

// open: a SQLite database in WAL mode, waiting for another writer rather than failing.
func open(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
	if err == nil {
		_, err = db.Exec("CREATE TABLE IF NOT EXISTS lines (line TEXT NOT NULL)")
	}
	return db, err
}

func (l *loader) Setup(sc worker.Scenario) error {
	path := filepath.Join(sc.StateDir, fmt.Sprintf("sqlsink-%d.db", sc.Instance))
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	db, err := open(path)
	l.rows = &worker.SQLSink{DB: db}
	return err
}

// LoadBatch: the rows and the id in one transaction (without an id, Commit refuses the batch).
func (l *loader) LoadBatch(id string, msgs [][]byte) error {
	loaded, err := l.rows.Commit(context.Background(), id, func(tx *sql.Tx) error {
		for _, m := range msgs {
			if _, err := tx.Exec("INSERT INTO lines (line) VALUES (?)", string(m)); err != nil {
				return err
			}
		}
		return nil
	})
	if loaded { // false: committed before, skipped
		l.loaded += len(msgs)
	}
	return err
}

func (l *loader) Report() map[string]any { return map[string]any{"loaded": l.loaded} }

func main() { worker.Main(&loader{}) }
