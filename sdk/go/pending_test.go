package worker

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// Loaders that finish batches in the background (AsyncLoader): the SDK reads and passes
// on the next batch meanwhile, acknowledges in request order, each batch only once it is
// done, and stops on a failed one.

// asyncCollect is the vectors' collect handler as an AsyncLoader whose batches are done
// at once: the same bytes must come out, at the same reads.
type asyncCollect struct{ collect }

func (a *asyncCollect) LoadAsync(ms [][]byte) <-chan error {
	done := make(chan error, 1)
	done <- a.collect.Load(ms)
	return done
}

func TestVectorsAsyncLoader(t *testing.T) {
	n := 0
	for _, v := range loadVectors(t) {
		if v.Handler != "collect" || v.Exit != 0 {
			continue
		}
		n++
		v := v
		t.Run(v.Name, func(t *testing.T) {
			w := &asyncCollect{}
			out := &bytes.Buffer{}
			in := &chunks{out: out}
			for _, c := range v.Stdin {
				in.left = append(in.left, b64(t, c))
			}
			env := map[string]string{}
			for k, val := range v.Env {
				env[k] = val
			}
			env["ETLSTAGE_STATE_DIR"] = t.TempDir()
			if err := Serve(w, in, out, func(k string) string { return env[k] }); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), b64(t, *v.Stdout)) {
				t.Fatalf("stdout %q, want %q", out.Bytes(), b64(t, *v.Stdout))
			}
			for i, mark := range append(in.marks, out.Len())[:len(v.Stdin)+1] {
				lo := 0
				if i > 0 {
					lo = in.marks[i-1]
				}
				if got, want := out.Bytes()[lo:mark], b64(t, v.Replies[i]); !bytes.Equal(got, want) {
					t.Fatalf("reply %d: %q, want %q", i, got, want)
				}
			}
			var want [][][]byte
			for _, b := range v.Loaded {
				batch := [][]byte{}
				for _, m := range b {
					batch = append(batch, b64(t, m))
				}
				want = append(want, batch)
			}
			if !reflect.DeepEqual(w.loaded, want) {
				t.Fatalf("loaded %q, want %q", w.loaded, want)
			}
		})
	}
	if n < 3 {
		t.Fatalf("only %d loader vectors", n)
	}
}

// overlapping: batch i is done only once batch i+1 has been read and passed to
// LoadAsync (the last at once); a batch that waits more than 5 s fails.
type overlapping struct {
	total   int
	mu      sync.Mutex
	loaded  []string
	release []chan struct{}
}

func (o *overlapping) LoadAsync(ms [][]byte) <-chan error {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := len(o.loaded)
	o.loaded = append(o.loaded, string(bytes.Join(ms, []byte(","))))
	if i > 0 {
		close(o.release[i-1])
	}
	o.release = append(o.release, make(chan struct{}))
	if i == o.total-1 {
		close(o.release[i])
	}
	done, release := make(chan error, 1), o.release[i]
	go func() {
		select {
		case <-release:
			done <- nil
		case <-time.After(5 * time.Second):
			done <- fmt.Errorf("batch %d: the next batch was not read while it was loading", i)
		}
	}()
	return done
}

func TestAsyncLoadOverlapsReadingTheNextBatch(t *testing.T) {
	// Worker-driven with batches of 1: a BNC (the first message of a larger batch) must
	// wait for the EOPs before it, so only full batches overlap there.
	for _, tc := range []struct{ mode, driver, size, input string }{
		{"batch", "supervisor", "2", "a\nb\n\x17c\n\x17d\n\x17"},
		{"batch", "worker", "1", "a\nb\nc\n"},
		{"single", "supervisor", "1", "a\nb\nc\n"},
	} {
		env := map[string]string{"ETLSTAGE_TYPE": "L", "ETLSTAGE_MODE": tc.mode, "ETLSTAGE_BATCH_SIZE": tc.size,
			"ETLSTAGE_BATCH_DRIVER": tc.driver}
		w := &overlapping{total: 3}
		var out bytes.Buffer
		if err := Serve(w, strings.NewReader(tc.input), &out, func(k string) string { return env[k] }); err != nil {
			t.Fatalf("%s %s: %v", tc.mode, tc.driver, err)
		}
		if want := "\x00\x00\x00"; out.String() != want {
			t.Fatalf("%s %s: output %q, want %q", tc.mode, tc.driver, out.String(), want)
		}
		if len(w.loaded) != 3 {
			t.Fatalf("loaded %q", w.loaded)
		}
	}
}

// gated: batch i is done when gates[i] is closed (or at once without a gate).
type gated struct {
	mu     sync.Mutex
	gates  map[int]chan struct{}
	fail   map[int]bool
	loaded int
	max    int
}

func (g *gated) LoadAsync(ms [][]byte) <-chan error {
	g.mu.Lock()
	i := g.loaded
	g.loaded++
	gate := g.gates[i]
	g.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		if gate != nil {
			<-gate
		}
		if g.fail[i] {
			done <- fmt.Errorf("disk full while writing batch %d", i)
		}
		close(done)
	}()
	return done
}

func (g *gated) MaxPending() int { return g.max }

func (g *gated) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.loaded
}

// A supervisor that sends the next batch only after the EOP of the one before: the EOP
// must come when the batch is done, not wait for a read that brings nothing.
func TestAsyncEOPDoesNotWaitForInput(t *testing.T) {
	env := map[string]string{"ETLSTAGE_TYPE": "L", "ETLSTAGE_MODE": "batch", "ETLSTAGE_BATCH_SIZE": "10"}
	g := &gated{gates: map[int]chan struct{}{0: make(chan struct{})}, max: 1}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(g, inR, outW, func(k string) string { return env[k] })
		outW.Close()
	}()
	inW.Write([]byte("a\nb\n\x17"))
	time.Sleep(50 * time.Millisecond)
	close(g.gates[0])
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 1)
		n, _ := io.ReadFull(outR, b)
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		if s != "\x00" {
			t.Fatalf("reply %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no EOP for a finished batch while the worker waits for input")
	}
	inW.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// EOPs in request order, at most MaxPending batches unfinished when the next is passed on,
// a failed batch stops the worker after the EOPs of those before it.
func TestAsyncOrderLimitAndFailure(t *testing.T) {
	env := map[string]string{"ETLSTAGE_TYPE": "L", "ETLSTAGE_MODE": "batch", "ETLSTAGE_BATCH_SIZE": "10"}
	getenv := func(k string) string { return env[k] }
	g := &gated{gates: map[int]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}, max: 1}
	inR, inW := io.Pipe()
	var out safeBuffer
	errc := make(chan error, 1)
	go func() { errc <- Serve(g, inR, &out, getenv) }()
	inW.Write([]byte("a\n\x17b\n\x17"))
	waitFor(t, func() bool { return g.count() == 2 })
	go inW.Write([]byte("c\n\x17"))
	time.Sleep(100 * time.Millisecond)
	if g.count() != 2 || out.String() != "" {
		t.Fatalf("batch 2 passed on (%d) or an EOP written (%q) before batch 0 was done", g.count(), out.String())
	}
	close(g.gates[1]) // batch 1 done first: its EOP still waits for batch 0's
	time.Sleep(50 * time.Millisecond)
	if out.String() != "" {
		t.Fatalf("an EOP overtook an earlier batch's: %q", out.String())
	}
	close(g.gates[0])
	waitFor(t, func() bool { return out.String() == "\x00\x00\x00" })
	inW.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	out.Reset()
	g = &gated{fail: map[int]bool{1: true}, max: 1}
	err := Serve(g, strings.NewReader("a\n\x17b\n\x17c\n\x17"), &out, getenv)
	if ExitStatus(err) != 1 || !strings.Contains(fmt.Sprint(err), "batch 1") || out.String() != "\x00" {
		t.Fatalf("exit %d (%v), output %q", ExitStatus(err), err, out.String())
	}
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *safeBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// An EOP goes out when its batch is done, also while the SDK waits, within the same
// read, for another batch before it passes on the next.
func TestAsyncEOPGoesOutDuringAWaitWithinARead(t *testing.T) {
	env := map[string]string{"ETLSTAGE_TYPE": "L", "ETLSTAGE_MODE": "batch", "ETLSTAGE_BATCH_SIZE": "10"}
	g := &gated{gates: map[int]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}, max: 1}
	var out safeBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(g, strings.NewReader("a\n\x17b\n\x17c\n\x17d\n\x17"), &out, func(k string) string { return env[k] })
	}()
	waitFor(t, func() bool { return g.count() == 2 })
	close(g.gates[0]) // batch 2 is passed on; batch 3 waits for batch 1
	waitFor(t, func() bool { return g.count() == 3 })
	waitFor(t, func() bool { return out.String() == "\x00" })
	close(g.gates[1])
	if err := <-errc; err != nil || out.String() != "\x00\x00\x00\x00" {
		t.Fatalf("%v, output %q", err, out.String())
	}
}
