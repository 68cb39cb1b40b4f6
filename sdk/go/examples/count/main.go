// count: an E-worker with the etlstage Go SDK: emits the numbers 1..N.
//
// Usage: count N [PER_CYCLE]
//   - plain mode: 1 .. N, then exit 0.
//   - cyclic, worker-managed offsets: each request gets the next PER_CYCLE numbers
//     (default 3). The offset lives in $ETLSTAGE_STATE_DIR/count-<instance>.offset and is
//     committed when the NEXT request arrives (the previous window was loaded), never on
//     end of input.
//   - cyclic, supervisor-managed offsets ({"start": S, "end": E}): S+1 .. E, capped at N.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"etlstage/worker"
)

type count struct {
	total, perCycle    int64
	offsetFile         string
	committed, emitted int64
}

func (c *count) Setup(s worker.Scenario) error {
	dir := s.StateDir
	if dir == "" {
		dir = "."
	}
	c.offsetFile = filepath.Join(dir, fmt.Sprintf("count-%d.offset", s.Instance))
	if data, err := os.ReadFile(c.offsetFile); err == nil {
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %v", c.offsetFile, err)
		}
		c.committed = n
	}
	c.emitted = c.committed
	return nil
}

func (c *count) Extract(req *worker.Request, emit func([]byte) error) error {
	first, last := int64(1), c.total
	switch {
	case req == nil: // plain: the whole run
	case req.Start != nil || req.End != nil: // supervisor offsets
		s, err := req.StartInt()
		if err != nil {
			return err
		}
		e, err := req.EndInt()
		if err != nil {
			return err
		}
		first, last = s+1, min(e, c.total)
	default: // worker offsets: continue after what was emitted
		first, last = c.emitted+1, min(c.emitted+c.perCycle, c.total)
		c.emitted = max(c.emitted, last)
	}
	for n := first; n <= last; n++ {
		if err := emit(strconv.AppendInt(nil, n, 10)); err != nil {
			return err
		}
	}
	return nil
}

func (c *count) OnWindowDone(*worker.Request) error {
	if c.emitted == c.committed {
		return nil
	}
	// write, sync, rename: a crash leaves the old offset or the new one, never half a file
	f, err := os.Create(c.offsetFile + ".tmp")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "%d\n", c.emitted); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	c.committed = c.emitted
	return os.Rename(c.offsetFile+".tmp", c.offsetFile)
}

func main() {
	usage := func() {
		fmt.Fprintf(os.Stderr, "usage: count N [PER_CYCLE], got %q\n", os.Args[1:])
		os.Exit(2)
	}
	if len(os.Args) < 2 {
		usage()
	}
	total, err := strconv.ParseInt(os.Args[1], 10, 64)
	per := int64(3)
	if err == nil && len(os.Args) > 2 {
		per, err = strconv.ParseInt(os.Args[2], 10, 64)
	}
	if err != nil || total < 0 || per < 1 {
		usage()
	}
	worker.Main(&count{total: total, perCycle: per})
}
