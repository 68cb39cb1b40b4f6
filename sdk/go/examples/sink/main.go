// sink: an idempotent L-worker with the etlstage Go SDK, for a stage with `mode: batch`
// and `batch_id: true`: each batch becomes one file named after its id in DIR (default
// $ETLSTAGE_STATE_DIR/sink-<instance>), written, synced and renamed by FileSink before
// the batch is acknowledged. A batch sent again after a crash keeps its id, finds its
// file there and is not written twice. Reports {"loaded": N, "output": DIR}.
//
// Usage: sink [DIR]
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"etlstage/worker"
)

type sink struct {
	files  worker.FileSink
	loaded int
}

func (s *sink) Setup(sc worker.Scenario) error {
	s.files.Dir = filepath.Join(sc.StateDir, fmt.Sprintf("sink-%d", sc.Instance))
	if len(os.Args) > 1 {
		s.files.Dir = os.Args[1]
	}
	return nil
}

// LoadBatch: an IDLoader is given each batch's id (without one, Commit refuses the batch).
func (s *sink) LoadBatch(id string, msgs [][]byte) error {
	written, err := s.files.Commit(id, msgs)
	if written { // false: committed before, skipped
		s.loaded += len(msgs)
	}
	return err
}

func (s *sink) Report() map[string]any {
	return map[string]any{"loaded": s.loaded, "output": s.files.Dir}
}

func main() { worker.Main(&sink{}) }
