// Package worker is the etlstage worker SDK for Go: the byte-marker protocol between the
// supervisor and an E-, T- or L-worker, with markers, mode and batch size read from the
// ETLSTAGE_* environment (docs/protocol.md).
//
// A transformer:
//
//	func main() {
//		worker.Main(worker.TransformFunc(func(msgs [][]byte) ([][]byte, error) {
//			out := make([][]byte, len(msgs))
//			for i, m := range msgs {
//				out[i] = bytes.ToUpper(m)
//			}
//			return out, nil
//		}))
//	}
//
// The same code works in single, batch, supervisor-driven and worker-driven (BNC) modes.
// A message slice passed to your code is valid only during the call: copy it to keep it.
package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Transformer answers a batch (in single mode, one message) with zero or more results.
type Transformer interface {
	Process(messages [][]byte) ([][]byte, error)
}

// Loader loads a batch durably; returning nil means "durable": only then is EOP written.
type Loader interface {
	Load(messages [][]byte) error
}

// IDLoader is a Loader that is given each batch's id (a stage with batch_id: true): the
// same whenever the same messages are sent again, never the same for other messages.
// Committing the id with the data (FileSink) makes loading idempotent. When a worker has
// both, LoadBatch is used; an AsyncLoader is not given ids.
type IDLoader interface {
	LoadBatch(batchID string, messages [][]byte) error
}

// AsyncLoader is a Loader that finishes batches in the background: LoadAsync starts
// loading one and returns a channel that delivers nil (or is closed) once the batch is
// durable, or delivers the error that stops the worker (exit 1) with that batch
// unacknowledged. Meanwhile the SDK reads the next batch and passes it on; it writes the
// EOPs in request order, each only once its batch is durable. The messages stay valid
// until the batch is done. When a worker has both methods, LoadAsync is used.
type AsyncLoader interface {
	LoadAsync(messages [][]byte) <-chan error
}

// PendingLimit bounds an AsyncLoader: how many batches may still be unfinished when
// LoadAsync is called for the next one (default 1); the SDK waits for the oldest beyond.
type PendingLimit interface {
	MaxPending() int
}

// Extractor emits the messages of one cycle (plain mode: of the whole run, req nil).
type Extractor interface {
	Extract(req *Request, emit func(message []byte) error) error
}

// WindowCommitter is an Extractor with worker-managed offsets: OnWindowDone is called when
// request n >= 1 arrives, before cycle n is extracted; the previous cycle's window was fully
// loaded downstream, so commit its offsets now. It is never called on end of input (that
// may mean the supervisor died).
type WindowCommitter interface {
	OnWindowDone(req *Request) error
}

// Setupper is called once, before the first request.
type Setupper interface {
	Setup(s Scenario) error
}

// Teardowner is called once, when input ends or the worker fails.
type Teardowner interface {
	Teardown() error
}

// Reporter returns counters for the supervisor's end-of-run summary (numbers, or one
// level of named numbers), counted from the start of the process; nil writes nothing.
// It is called after each batch or cycle, and its result is stored before that EOP as
// $ETLSTAGE_STATE_DIR/report-<instance>-<pid>.json.
type Reporter interface {
	Report() map[string]any
}

// TransformFunc, LoadFunc and ExtractFunc make plain functions workers.
type (
	TransformFunc func(messages [][]byte) ([][]byte, error)
	LoadFunc      func(messages [][]byte) error
	ExtractFunc   func(req *Request, emit func([]byte) error) error
)

func (f TransformFunc) Process(m [][]byte) ([][]byte, error)            { return f(m) }
func (f LoadFunc) Load(m [][]byte) error                                { return f(m) }
func (f ExtractFunc) Extract(r *Request, emit func([]byte) error) error { return f(r, emit) }

// Request is one cycle request to a cyclic extractor. Raw is empty with worker-managed
// offsets, {"start": S, "end": E} with supervisor-managed ones (Start and End then hold
// the values: json.Number for integers, string for ISO-8601 instants).
type Request struct {
	Raw        []byte
	Cycle      int
	Start, End any
}

func parseRequest(raw []byte, cycle int) *Request {
	r := &Request{Raw: append([]byte(nil), raw...), Cycle: cycle}
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var doc map[string]any
		if dec.Decode(&doc) == nil {
			r.Start, r.End = doc["start"], doc["end"]
		}
	}
	return r
}

// StartInt and EndInt: the bounds of a counter offset policy as integers.
func (r *Request) StartInt() (int64, error) { return asInt(r.Start, "start") }
func (r *Request) EndInt() (int64, error)   { return asInt(r.End, "end") }

func asInt(v any, name string) (int64, error) {
	switch n := v.(type) {
	case json.Number:
		return n.Int64()
	case string:
		return strconv.ParseInt(n, 10, 64)
	}
	return 0, fmt.Errorf("request %s: expected an integer, got %v", name, v)
}

const chunkSize = 1 << 20

// Serve runs w until in ends; nil is a clean end. The scenario comes from getenv
// (os.Getenv). Everything a read made answerable is written to out and flushed before
// the next read. Errors: *ConfigError (exit 2), *ProtocolViolation (exit 3), or the
// worker's own (exit 1); see ExitStatus.
func Serve(w any, in io.Reader, out io.Writer, getenv func(string) string) (err error) {
	sc, err := ScenarioFromEnv(getenv)
	if err != nil {
		return err
	}
	s := &server{sc: sc, w: w, out: out}
	switch {
	case sc.Type == "E":
		s.mode = modeCycle
	case !sc.IsBatch():
		s.mode = modeSingle
	case sc.WorkerDriven():
		s.mode = modeWorkerDriven
	default:
		s.mode = modeSupervisorDriven
	}
	if rp, ok := w.(Reporter); ok && sc.StateDir != "" {
		s.rep = rp
	}
	switch sc.Type {
	case "E":
		s.e, _ = w.(Extractor)
	case "T":
		if s.t, _ = w.(Transformer); s.t != nil {
			s.process = s.t.Process
			if f, ok := w.(TransformFunc); ok {
				s.process = f // one call per batch, not two
			}
		}
	case "L":
		s.l, _ = w.(Loader)
		s.il, _ = w.(IDLoader)
		if s.al, _ = w.(AsyncLoader); s.al != nil {
			s.maxPending = 1
			if pl, ok := w.(PendingLimit); ok {
				s.maxPending = max(0, pl.MaxPending())
			}
		}
	}
	if s.e == nil && s.t == nil && s.l == nil && s.il == nil && s.al == nil {
		return fmt.Errorf("a %s-stage needs a worker implementing %s, got %T", sc.Type,
			map[string]string{"E": "Extractor", "T": "Transformer", "L": "Loader or AsyncLoader"}[sc.Type], w)
	}
	if su, ok := w.(Setupper); ok {
		if err := su.Setup(sc); err != nil {
			return err
		}
	}
	if td, ok := w.(Teardowner); ok {
		defer func() {
			if e := td.Teardown(); err == nil {
				err = e
			}
		}()
	}
	if sc.Type == "E" && sc.Mode == "plain" {
		if err := s.extract(nil); err != nil {
			return s.fail(err)
		}
		if err := s.report(); err != nil {
			return s.fail(err)
		}
		return s.flush()
	}
	return s.loop(in)
}

// How the server answers a message, from the scenario.
const (
	modeCycle            = iota // E: each message is a cycle request
	modeSingle                  // T, L: each message is a request
	modeWorkerDriven            // T, L: BNC until the batch is full
	modeSupervisorDriven        // T, L: EOB closes the batch
)

type server struct {
	sc   Scenario
	mode int
	rep  Reporter // nil: no reports (none defined, or no state directory)
	w    any
	e    Extractor
	t    Transformer
	// t's Process
	process func([][]byte) ([][]byte, error)
	l       Loader
	il      IDLoader
	al      AsyncLoader
	// Batches an AsyncLoader is finishing, oldest first; at most maxPending of them when
	// it is called for the next one.
	pending    []<-chan error
	maxPending int
	reads      chan readRequest // to the goroutine that reads while batches are pending
	out        io.Writer
	obuf       []byte // the answers to the current read, written once per read
	mark       int    // obuf[:mark] holds complete answers (each ended by EOP or BNC)
	ends       []int  // for each complete answer in obuf: where it ends, its number of results
	cur        int    // results of the answer under way
	framing    int    // the EOMs, EOPs and BNCs of the complete answers in obuf
	batch      [][]byte
	owned      int // batch[:owned] are copies; the rest point into the read buffer
	cycle      int
	one        [][]byte
}

func (s *server) loop(in io.Reader) error {
	// buf[:held] is a message not yet ended by EOM: each read appends to it, so no chunk
	// is ever copied to join it to the bytes before.
	buf := make([]byte, chunkSize)
	held := 0
	defer func() {
		if s.reads != nil {
			close(s.reads) // the reading goroutine ends
		}
	}()
	s.one = make([][]byte, 1)
	for {
		if held == len(buf) { // one message longer than the buffer: make room
			buf = append(buf, make([]byte, len(buf))...)
		}
		n, rerr := s.read(in, buf[held:])
		if n < 0 { // a batch finished in the background failed
			return s.fail(rerr)
		}
		if n > 0 {
			pos, err := s.feed(buf[:held+n], held)
			if err != nil {
				return s.fail(err)
			}
			// The read buffer is reused: messages of an open batch are copied out of it.
			for i := s.owned; i < len(s.batch); i++ {
				s.batch[i] = bytes.Clone(s.batch[i])
			}
			s.owned = len(s.batch)
			held = copy(buf, buf[pos:held+n])
			if err := s.settle(-1); err != nil {
				return s.fail(err)
			}
			if err := s.flush(); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			if err := s.settle(0); err != nil { // the batches loading in the background first
				return s.fail(err)
			}
			if err := s.flush(); err != nil {
				return err
			}
			if len(s.batch) > 0 || held > 0 {
				fmt.Fprintf(os.Stderr, "%s: stdin closed with an unfinished batch (%d messages, %d bytes): "+
					"not processed; the supervisor will send it again\n", s.sc.Stage, len(s.batch), held)
			}
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

type readRequest struct {
	p    []byte
	done chan readResult
}

type readResult struct {
	n   int
	err error
}

// read reads into p. While an AsyncLoader's batches are pending, the read happens in a
// goroutine and each batch that finishes meanwhile is acknowledged at once, so an EOP
// never waits for input the supervisor will only send after it. n < 0: such a batch
// failed (err).
func (s *server) read(in io.Reader, p []byte) (int, error) {
	if s.al == nil {
		return in.Read(p)
	}
	if s.reads == nil {
		s.reads = make(chan readRequest)
		go func() {
			for r := range s.reads {
				n, err := in.Read(r.p)
				r.done <- readResult{n, err}
			}
		}()
	}
	done := make(chan readResult, 1)
	s.reads <- readRequest{p, done}
	for {
		if len(s.pending) == 0 {
			r := <-done
			return r.n, r.err
		}
		select {
		case r := <-done:
			return r.n, r.err
		case err := <-s.pending[0]:
			if err == nil {
				err = s.acked()
			}
			if err == nil {
				err = s.flush()
			}
			if err != nil {
				go func() { <-done }() // the read under way ends on its own
				return -1, err
			}
		}
	}
}

// settle acknowledges the batches at the front of pending that are done, waiting until at
// most keep are pending (keep < 0: no waiting). A failed batch's error is returned, the
// batch unacknowledged. EOPs written after a wait go out at once.
func (s *server) settle(keep int) error {
	waited := false
	for len(s.pending) > 0 {
		var err error
		if keep >= 0 && len(s.pending) > keep {
			err = <-s.pending[0]
			waited = true
		} else {
			select {
			case err = <-s.pending[0]:
			default:
				return s.flushIf(waited)
			}
		}
		if err == nil {
			err = s.acked()
		}
		if err != nil {
			return err
		}
	}
	return s.flushIf(waited)
}

func (s *server) flushIf(cond bool) error {
	if cond {
		return s.flush()
	}
	return nil
}

// acked: the oldest pending batch is durable; its report, then its EOP.
func (s *server) acked() error {
	s.pending = s.pending[1:]
	if err := s.report(); err != nil {
		return err
	}
	return s.answered(s.sc.Markers.EOP)
}

// loadAsync hands a copy of batch to the AsyncLoader (the read buffer and the batch's
// slice are reused); its EOP is written when it is done (settle).
func (s *server) loadAsync(batch [][]byte) error {
	if err := s.settle(s.maxPending); err != nil {
		return err
	}
	size := 0
	for _, m := range batch {
		size += len(m)
	}
	data, msgs := make([]byte, 0, size), make([][]byte, len(batch))
	for i, m := range batch {
		data = append(data, m...)
		msgs[i] = data[len(data)-len(m) : len(data) : len(data)]
	}
	s.pending = append(s.pending, s.al.LoadAsync(msgs))
	return nil
}

// feed handles the complete messages and EOBs of data (whose first `old` bytes were seen
// before) and returns how many bytes it consumed.
func (s *server) feed(data []byte, old int) (int, error) {
	m := s.sc.Markers
	// One pass over the new bytes for the markers only a worker writes and, where an EOB
	// is not allowed, for EOB; in batch mode the EOBs are found as the batches end.
	single := s.sc.Type == "E" || !s.sc.IsBatch()
	third := m.BNC
	if single {
		third = m.EOB
	}
	first := -1 // single: the first EOB in data (the bytes seen before hold none)
	if at := indexAny3(data[old:], m.EOP, m.BNC, third); at >= 0 {
		if data[old+at] == m.EOB { // an EOP or BNC after it still comes first
			first = old + at
			at = indexAny3(data[first:], m.EOP, m.BNC, m.BNC)
			if at >= 0 {
				at += first - old
			}
		}
		if at >= 0 {
			name := "EOP"
			if data[old+at] == m.BNC {
				name = "BNC"
			}
			return 0, &ProtocolViolation{fmt.Sprintf("the supervisor's input holds %s (0x%02x), which only a worker may write; bytes seen: %q",
				name, data[old+at], around(data, old+at))}
		}
	}
	pos := 0
	for {
		k := first
		if !single {
			if k = bytes.IndexByte(data[pos:], m.EOB); k >= 0 {
				k += pos
			}
		}
		stop := len(data)
		if k >= 0 {
			stop = k
		}
		for {
			e := bytes.IndexByte(data[pos:stop], m.EOM)
			if e < 0 {
				break
			}
			var err error
			if s.mode == modeSingle && s.t != nil {
				err = s.transformOne(data[pos : pos+e])
			} else {
				err = s.message(data[pos : pos+e])
			}
			if err != nil {
				return 0, err
			}
			pos += e + 1
		}
		if k < 0 {
			return pos, nil
		}
		if pos < k {
			return 0, &ProtocolViolation{fmt.Sprintf("EOB arrived in the middle of a message (its bytes were not ended by EOM); bytes seen: %q", around(data, k))}
		}
		if single {
			return 0, &ProtocolViolation{fmt.Sprintf("EOB received by a %s-worker in %s mode", s.sc.Type, s.sc.Mode)}
		}
		if err := s.runBatch(s.batch); err != nil {
			return 0, err
		}
		s.batch, s.owned = s.batch[:0], 0
		pos = k + 1
	}
}

func (s *server) message(msg []byte) error {
	switch s.mode {
	case modeCycle:
		req := parseRequest(msg, s.cycle)
		if c, ok := s.w.(WindowCommitter); ok && s.cycle > 0 {
			if err := c.OnWindowDone(req); err != nil {
				return err
			}
		}
		if err := s.extract(req); err != nil {
			return err
		}
		s.cycle++
		return s.acknowledge()
	case modeSingle:
		s.one[0] = msg
		return s.runBatch(s.one)
	case modeWorkerDriven:
		s.batch = append(s.batch, msg)
		if len(s.batch) >= s.sc.BatchSize {
			err := s.runBatch(s.batch)
			s.batch, s.owned = s.batch[:0], 0
			return err
		}
		if err := s.settle(0); err != nil { // answers in request order: earlier EOPs first
			return err
		}
		return s.answered(s.sc.Markers.BNC)
	default:
		s.batch = append(s.batch, msg)
		return nil
	}
}

// runBatch: results (T) or a durable load (L), then the report, then EOP. An empty batch
// is answered with EOP alone.
func (s *server) runBatch(batch [][]byte) error {
	id := ""
	if s.sc.BatchID && s.sc.Type == "L" && s.mode == modeSupervisorDriven {
		var err error
		if id, batch, err = takeBatchID(batch); err != nil {
			return err
		}
	}
	if len(batch) > 0 && s.al != nil {
		return s.loadAsync(batch)
	}
	if len(s.pending) > 0 { // answers in request order: earlier EOPs first
		if err := s.settle(0); err != nil {
			return err
		}
	}
	if len(batch) > 0 {
		if s.t != nil {
			results, err := s.process(batch)
			if err != nil {
				return err
			}
			for _, r := range results {
				if err := s.write(r); err != nil {
					return err
				}
			}
		} else if s.il != nil {
			if err := s.il.LoadBatch(id, batch); err != nil {
				return err
			}
		} else if err := s.l.Load(batch); err != nil {
			return err
		}
		if err := s.report(); err != nil {
			return err
		}
	}
	return s.answered(s.sc.Markers.EOP)
}

// transformOne: runBatch for a transformer in single mode, as few steps a message as it takes.
func (s *server) transformOne(msg []byte) error {
	s.one[0] = msg
	results, err := s.process(s.one)
	if err != nil {
		return err
	}
	eom := s.sc.Markers.EOM
	for _, r := range results {
		s.obuf = append(append(s.obuf, r...), eom)
		s.cur++
		if len(s.obuf) >= chunkSize { // as write does
			if err := s.flush(); err != nil {
				return err
			}
		}
	}
	if s.rep != nil {
		if err := s.report(); err != nil {
			return err
		}
	}
	return s.answered(s.sc.Markers.EOP)
}

func (s *server) extract(req *Request) error {
	return s.e.Extract(req, s.write)
}

func (s *server) acknowledge() error {
	if err := s.report(); err != nil {
		return err
	}
	return s.answered(s.sc.Markers.EOP)
}

// write one result and its EOM. Results are checked for markers when the answers go out
// (check), all of a read's at once.
func (s *server) write(r []byte) error {
	s.obuf = append(append(s.obuf, r...), s.sc.Markers.EOM)
	s.cur++
	if len(s.obuf) >= chunkSize { // a big answer (an extractor's run) goes out as it grows
		return s.flush()
	}
	return nil
}

// answered ends an answer with EOP (or BNC): all before it is complete.
func (s *server) answered(marker byte) error {
	s.obuf = append(s.obuf, marker)
	s.mark = len(s.obuf)
	s.ends = append(s.ends, s.mark, s.cur)
	s.framing += s.cur + 1
	s.cur = 0
	return nil
}

// check that no result in obuf holds a marker: obuf must hold as many marker bytes as the
// SDK wrote, an EOM per result and an EOP or BNC per answer (one pass over obuf for all
// four markers, not four searches per result). When the count is off, obuf keeps the
// answers before the culprit's and the error says which.
func (s *server) check() error {
	m := s.sc.Markers
	if countAny4(s.obuf, m.EOM, m.EOP, m.BNC, m.EOB) == s.framing+s.cur {
		return nil
	}
	start := 0
	for i := 0; i <= len(s.ends); i += 2 {
		end, n := len(s.obuf), s.cur // the answer under way, after the complete ones
		if i < len(s.ends) {
			end, n = s.ends[i]-1, s.ends[i+1] // without its EOP or BNC
		}
		region := s.obuf[start:end]
		for _, mk := range []struct {
			b    byte
			name string
		}{{m.EOP, "EOP"}, {m.EOB, "EOB"}, {m.BNC, "BNC"}, {m.EOM, "EOM"}} {
			at := bytes.IndexByte(region, mk.b)
			if at < 0 || (mk.b == m.EOM && bytes.Count(region, []byte{m.EOM}) == n) {
				continue
			}
			s.obuf = s.obuf[:start]
			return &ProtocolViolation{fmt.Sprintf("a result of stage %q contains its %s marker 0x%02x: %q; "+
				"messages must not contain marker bytes (choose other markers, or encode the data)", s.sc.Stage, mk.name, mk.b, around(region, at))}
		}
		if i < len(s.ends) {
			start = s.ends[i]
		}
	}
	return nil
}

// flush writes the answers to the current read, those before a result holding a marker
// when one does (and then that error).
func (s *server) flush() error {
	verr := s.check()
	var err error
	if len(s.obuf) > 0 {
		_, err = s.out.Write(s.obuf)
	}
	s.obuf, s.mark, s.ends, s.cur, s.framing = s.obuf[:0], 0, s.ends[:0], 0, 0
	if verr != nil {
		return verr
	}
	return err
}

// fail: the worker's code (or the input) failed while a request was answered; the answers
// completed before it are still sent, never a part of the failed one's.
func (s *server) fail(err error) error {
	s.obuf, s.cur = s.obuf[:s.mark], 0
	if ferr := s.flush(); ferr != nil {
		var pv *ProtocolViolation
		if errors.As(ferr, &pv) {
			return ferr // a result before the failure held a marker: that came first
		}
	}
	return err
}

func (s *server) report() error {
	if s.rep == nil {
		return nil
	}
	counters := s.rep.Report()
	if counters == nil {
		return nil
	}
	data, err := json.Marshal(counters)
	if err != nil {
		return err
	}
	file := filepath.Join(s.sc.StateDir, fmt.Sprintf("report-%d-%d.json", s.sc.Instance, os.Getpid()))
	if err := os.WriteFile(file+".tmp", data, 0o644); err != nil {
		return err
	}
	return os.Rename(file+".tmp", file)
}

func around(b []byte, at int) []byte {
	lo, hi := max(0, at-24), min(len(b), at+24)
	return b[lo:hi]
}

// ExitStatus of an error Serve returned: 0 nil, 2 configuration, 3 protocol violation, 1 otherwise.
func ExitStatus(err error) int {
	var ce *ConfigError
	var pv *ProtocolViolation
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce):
		return 2
	case errors.As(err, &pv):
		return 3
	}
	return 1
}

// Main serves w on stdin/stdout and exits with its status; errors go to stderr. Stray
// fmt.Print output goes to stderr too: stdout carries protocol bytes only.
func Main(w any) {
	stdout := os.Stdout
	os.Stdout = os.Stderr
	err := Serve(w, os.Stdin, stdout, os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
	}
	os.Exit(ExitStatus(err))
}
