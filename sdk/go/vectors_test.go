package worker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A vector of sdk/vectors/ (format: sdk/vectors/README.md).
type vector struct {
	Name    string            `json:"name"`
	About   string            `json:"about"`
	Env     map[string]string `json:"env"`
	Handler string            `json:"handler"`
	Args    struct {
		Cycles [][]string `json:"cycles"`
	} `json:"args"`
	Stdin   []string       `json:"stdin"`
	Exit    int            `json:"exit"`
	Replies []string       `json:"replies"`
	Stdout  *string        `json:"stdout"`
	Loaded  [][]string     `json:"loaded"`
	Commits []int          `json:"commits"`
	Report  map[string]any `json:"report"`
}

func b64(t *testing.T, s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The handlers every SDK's test implements identically.
type echo struct{}

func (echo) Process(m [][]byte) ([][]byte, error) { return m, nil }

type upperASCII struct{}

func (upperASCII) Process(ms [][]byte) ([][]byte, error) {
	out := make([][]byte, len(ms))
	for i, m := range ms {
		r := append([]byte(nil), m...)
		for j, c := range r {
			if c >= 'a' && c <= 'z' {
				r[j] = c - 32
			}
		}
		out[i] = r
	}
	return out, nil
}

type splitComma struct{}

func (splitComma) Process(ms [][]byte) ([][]byte, error) {
	var out [][]byte
	for _, m := range ms {
		out = append(out, bytes.Split(m, []byte(","))...)
	}
	return out, nil
}

type drop struct{}

func (drop) Process([][]byte) ([][]byte, error) { return nil, nil }

type countBatch struct{ batches, messages int }

func (c *countBatch) Process(ms [][]byte) ([][]byte, error) {
	c.batches++
	c.messages += len(ms)
	return [][]byte{[]byte(strconv.Itoa(len(ms)))}, nil
}
func (c *countBatch) Report() map[string]any {
	return map[string]any{"batches": c.batches, "messages": c.messages}
}

type collect struct{ loaded [][][]byte }

func (c *collect) Load(ms [][]byte) error {
	batch := make([][]byte, len(ms))
	for i, m := range ms {
		batch[i] = bytes.Clone(m)
	}
	c.loaded = append(c.loaded, batch)
	return nil
}
func (c *collect) Report() map[string]any {
	n := 0
	for _, b := range c.loaded {
		n += len(b)
	}
	return map[string]any{"batches": len(c.loaded), "messages": n}
}

type emit struct {
	cycles  [][][]byte
	commits []int
}

func (e *emit) Extract(req *Request, out func([]byte) error) error {
	cycle := 0
	if req != nil {
		cycle = req.Cycle
	}
	if cycle < len(e.cycles) {
		for _, m := range e.cycles[cycle] {
			if err := out(m); err != nil {
				return err
			}
		}
	}
	return nil
}
func (e *emit) OnWindowDone(req *Request) error {
	e.commits = append(e.commits, req.Cycle-1)
	return nil
}

type emitRange struct{ emit }

func (e *emitRange) Extract(req *Request, out func([]byte) error) error {
	start, err := req.StartInt()
	if err != nil {
		return err
	}
	end, err := req.EndInt()
	if err != nil {
		return err
	}
	for i := start; i < end; i++ {
		if err := out([]byte(strconv.FormatInt(i, 10))); err != nil {
			return err
		}
	}
	return nil
}

func handler(t *testing.T, v vector) any {
	switch v.Handler {
	case "echo":
		return echo{}
	case "upper-ascii":
		return upperASCII{}
	case "split-comma":
		return splitComma{}
	case "drop":
		return drop{}
	case "count-batch":
		return &countBatch{}
	case "collect":
		return &collect{}
	case "emit":
		e := &emit{}
		for _, c := range v.Args.Cycles {
			var cycle [][]byte
			for _, m := range c {
				cycle = append(cycle, b64(t, m))
			}
			e.cycles = append(e.cycles, cycle)
		}
		return e
	case "emit-range":
		return &emitRange{}
	}
	t.Fatalf("unknown handler %q", v.Handler)
	return nil
}

// chunks hands out one chunk per Read and notes how much output had arrived at each Read.
type chunks struct {
	left  [][]byte
	out   *bytes.Buffer
	marks []int
}

func (c *chunks) Read(p []byte) (int, error) {
	c.marks = append(c.marks, c.out.Len())
	if len(c.left) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.left[0])
	if n < len(c.left[0]) {
		c.left[0] = c.left[0][n:]
	} else {
		c.left = c.left[1:]
	}
	return n, nil
}

func loadVectors(t *testing.T) []vector {
	files, err := filepath.Glob(filepath.Join("..", "vectors", "*.json"))
	if err != nil || len(files) < 4 {
		t.Fatalf("vectors not found: %v %v", files, err)
	}
	sort.Strings(files)
	var all []vector
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var vs []vector
		if err := json.Unmarshal(data, &vs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, vs...)
	}
	return all
}

func TestVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			w := handler(t, v)
			out := &bytes.Buffer{}
			in := &chunks{out: out}
			for _, c := range v.Stdin {
				in.left = append(in.left, b64(t, c))
			}
			env := map[string]string{}
			for k, val := range v.Env {
				env[k] = val
			}
			if v.Handler == "count-batch" || v.Handler == "collect" {
				env["ETLSTAGE_STATE_DIR"] = t.TempDir()
			}
			err := Serve(w, in, out, func(k string) string { return env[k] })
			if got := ExitStatus(err); got != v.Exit {
				t.Fatalf("%s: exit %d (%v), want %d", v.About, got, err, v.Exit)
			}
			if v.Exit != 0 {
				return
			}
			total := out.Len()
			if !bytes.Equal(out.Bytes(), b64(t, *v.Stdout)) {
				t.Fatalf("stdout %q, want %q", out.Bytes(), b64(t, *v.Stdout))
			}
			bounds := append(append([]int(nil), in.marks...), total)
			if len(bounds) > len(v.Stdin)+1 {
				bounds = bounds[:len(v.Stdin)+1]
			}
			for len(bounds) < len(v.Stdin)+1 {
				bounds = append(bounds, total)
			}
			if len(in.marks) > len(v.Stdin) && in.marks[len(v.Stdin)] != total {
				t.Fatalf("output after end of input")
			}
			for i, b := range bounds {
				lo := 0
				if i > 0 {
					lo = bounds[i-1]
				}
				if got, want := out.Bytes()[lo:b], b64(t, v.Replies[i]); !bytes.Equal(got, want) {
					t.Fatalf("reply %d: %q, want %q", i, got, want)
				}
			}
			if v.Loaded != nil {
				var want [][][]byte
				for _, b := range v.Loaded {
					batch := [][]byte{}
					for _, m := range b {
						batch = append(batch, b64(t, m))
					}
					want = append(want, batch)
				}
				if got := w.(*collect).loaded; !reflect.DeepEqual(got, want) {
					t.Fatalf("loaded %q, want %q", got, want)
				}
			}
			if v.Commits != nil {
				var got []int
				switch e := w.(type) {
				case *emit:
					got = e.commits
				case *emitRange:
					got = e.commits
				}
				if len(got) != len(v.Commits) || (len(got) > 0 && !reflect.DeepEqual(got, v.Commits)) {
					t.Fatalf("commits %v, want %v", got, v.Commits)
				}
			}
			var report map[string]any
			if dir := env["ETLSTAGE_STATE_DIR"]; dir != "" {
				files, _ := filepath.Glob(filepath.Join(dir, "report-*.json"))
				sort.Strings(files)
				if len(files) > 0 {
					data, _ := os.ReadFile(files[len(files)-1])
					if err := json.Unmarshal(data, &report); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !reflect.DeepEqual(report, v.Report) {
				t.Fatalf("report %v, want %v", report, v.Report)
			}
		})
	}
}

// A worker whose code fails still sends the answers it completed before (the supervisor
// then sends only the failed request again), never a part of the failed one.
func TestFailureSendsCompletedAnswersOnly(t *testing.T) {
	env := map[string]string{"ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": "single"}
	failOnC := TransformFunc(func(m [][]byte) ([][]byte, error) {
		if string(m[0]) == "c" {
			return nil, errors.New("cannot take c")
		}
		return [][]byte{m[0], []byte("+")}, nil
	})
	var out bytes.Buffer
	err := Serve(failOnC, strings.NewReader("a\nb\nc\nd\n"), &out, func(k string) string { return env[k] })
	if ExitStatus(err) != 1 || out.String() != "a\n+\n\x00b\n+\n\x00" {
		t.Fatalf("exit %d (%v), output %q", ExitStatus(err), err, out.String())
	}
	// A result holding a marker: its own earlier results are not sent either.
	markerOnC := TransformFunc(func(m [][]byte) ([][]byte, error) {
		if string(m[0]) == "c" {
			return [][]byte{[]byte("ok"), []byte("bad\x00")}, nil
		}
		return m, nil
	})
	out.Reset()
	err = Serve(markerOnC, strings.NewReader("a\nc\n"), &out, func(k string) string { return env[k] })
	if ExitStatus(err) != 3 || out.String() != "a\n\x00" {
		t.Fatalf("exit %d (%v), output %q", ExitStatus(err), err, out.String())
	}
	// A violation in the input after complete answers: they are sent.
	out.Reset()
	err = Serve(TransformFunc(func(m [][]byte) ([][]byte, error) { return m, nil }), strings.NewReader("a\n\x17"), &out,
		func(k string) string { return env[k] })
	if ExitStatus(err) != 3 || out.String() != "a\n\x00" {
		t.Fatalf("exit %d (%v), output %q", ExitStatus(err), err, out.String())
	}
}

// Each of the four markers in a result is refused, in both modes, with the answers before
// it sent, also when the output buffer is flushed in the middle of a read.
func TestEveryMarkerInAResultIsRefused(t *testing.T) {
	for _, mode := range []string{"single", "batch"} {
		env := map[string]string{"ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": mode, "ETLSTAGE_BATCH_SIZE": "2"}
		input, want := "a\nc\n", "a\n\x00"
		if mode == "batch" {
			input, want = "a\n\x17c\n\x17", "a\n\x00"
		}
		for _, mk := range []byte{DefaultMarkers.EOM, DefaultMarkers.EOP, DefaultMarkers.EOB, DefaultMarkers.BNC} {
			bad := TransformFunc(func(m [][]byte) ([][]byte, error) {
				if string(m[0]) == "c" {
					return [][]byte{[]byte("ok"), {'x', mk, 'y'}}, nil
				}
				return m, nil
			})
			var out bytes.Buffer
			err := Serve(bad, strings.NewReader(input), &out, func(k string) string { return env[k] })
			if ExitStatus(err) != 3 || out.String() != want {
				t.Errorf("%s mode, marker 0x%02x: exit %d (%v), output %q", mode, mk, ExitStatus(err), err, out.String())
			}
			// After a megabyte of good answers in the same read (flushed as the buffer fills).
			big := strings.Repeat(strings.Repeat("b", 99)+"\n", 20000)
			in2 := big + input
			if mode == "batch" {
				in2 = strings.ReplaceAll(big, "\n", "\n\x17") + input
			}
			out.Reset()
			err = Serve(bad, strings.NewReader(in2), &out, func(k string) string { return env[k] })
			good := strings.Repeat(strings.Repeat("b", 99)+"\n\x00", 20000) + want
			if ExitStatus(err) != 3 || out.String() != good {
				t.Errorf("%s mode, marker 0x%02x after 2 MB: exit %d (%v), %d bytes out, want %d", mode, mk, ExitStatus(err), err, out.Len(), len(good))
			}
		}
	}
}
