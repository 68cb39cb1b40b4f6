// sink: an L-worker with the etlstage Go SDK: appends each message, one line each, to
// FILE (default $ETLSTAGE_STATE_DIR/sink-<instance>.out) and syncs it before the batch is
// acknowledged. Reports {"loaded": N}.
//
// Usage: sink [FILE]
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"etlstage/worker"
)

type sink struct {
	f      *os.File
	loaded int
}

func (s *sink) Setup(sc worker.Scenario) error {
	file := filepath.Join(sc.StateDir, fmt.Sprintf("sink-%d.out", sc.Instance))
	if len(os.Args) > 1 {
		file = os.Args[1]
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	s.f = f
	return err
}

func (s *sink) Load(msgs [][]byte) error {
	var buf []byte
	for _, m := range msgs {
		buf = append(append(buf, m...), '\n')
	}
	if _, err := s.f.Write(buf); err != nil {
		return err
	}
	s.loaded += len(msgs)
	return s.f.Sync() // durable before the SDK writes EOP
}

func (s *sink) Report() map[string]any { return map[string]any{"loaded": s.loaded} }

func (s *sink) Teardown() error { return s.f.Close() }

func main() { worker.Main(&sink{}) }
