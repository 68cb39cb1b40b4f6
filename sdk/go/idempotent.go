package worker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// batchHeader opens each L batch of a stage with batch_id: true (docs/protocol.md: batch ids).
var batchHeader = []byte("etlstage-batch-id ")
var batchIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// takeBatchID: the id in a batch's header and the messages after it.
func takeBatchID(batch [][]byte) (string, [][]byte, error) {
	if len(batch) == 0 || !bytes.HasPrefix(batch[0], batchHeader) || !batchIDPattern.Match(batch[0][len(batchHeader):]) {
		shown := "an empty batch"
		if len(batch) > 0 {
			shown = fmt.Sprintf("%q", batch[0][:min(len(batch[0]), 60)])
		}
		return "", nil, &ProtocolViolation{"ETLSTAGE_BATCH_ID=1: expected a batch id header (etlstage-batch-id <32 hex digits>) first, got " + shown}
	}
	return string(batch[0][len(batchHeader):]), batch[1:], nil
}

// ErrNoBatchID: a batch came without an id to commit it with.
var ErrNoBatchID = errors.New("this loader commits each batch with its id, but the batch came without one: " +
	"give the stage `batch_id: true` (L-stage, mode: batch) in stages.yaml")

// FileSink commits each batch as one file named after its id, in Dir: written to a
// temporary name, fsynced, renamed, the folder fsynced. A file is there whole or not at
// all, and a batch whose file is there is not written again.
type FileSink struct {
	Dir    string
	Prefix string // default "batch-"
	Suffix string // default ".txt"
}

// Path of the file of batch id.
func (f FileSink) Path(id string) string {
	prefix, suffix := f.Prefix, f.Suffix
	if prefix == "" {
		prefix = "batch-"
	}
	if suffix == "" {
		suffix = ".txt"
	}
	return filepath.Join(f.Dir, prefix+id+suffix)
}

// Commit writes the batch's file (each message followed by a newline); false, and
// nothing written, when the id was committed before.
func (f FileSink) Commit(id string, messages [][]byte) (bool, error) {
	if id == "" {
		return false, ErrNoBatchID
	}
	final := f.Path(id)
	if _, err := os.Stat(final); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(f.Dir, 0o755); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(f.Dir, ".tmp-")
	if err != nil {
		return false, err
	}
	var data []byte
	for _, m := range messages {
		data = append(append(data, m...), '\n')
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if e := tmp.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = os.Rename(tmp.Name(), final)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return false, err
	}
	dir, err := os.Open(f.Dir)
	if err != nil {
		return false, err
	}
	defer dir.Close()
	return true, dir.Sync() // the rename itself is durable
}
