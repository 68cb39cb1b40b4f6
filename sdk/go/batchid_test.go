package worker

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testID = "0123456789abcdef0123456789abcdef"

type idCollect struct{ got [][]string }

func (c *idCollect) LoadBatch(id string, ms [][]byte) error {
	row := []string{id}
	for _, m := range ms {
		row = append(row, string(m))
	}
	c.got = append(c.got, row)
	return nil
}

func batchEnv(batchID string) func(string) string {
	env := map[string]string{"ETLSTAGE_TYPE": "L", "ETLSTAGE_MODE": "batch", "ETLSTAGE_BATCH_SIZE": "2", "ETLSTAGE_BATCH_ID": batchID}
	return func(k string) string { return env[k] }
}

func TestBatchIDHeaderIsStrippedAndGivenToLoadBatch(t *testing.T) {
	w := &idCollect{}
	out := &bytes.Buffer{}
	in := strings.NewReader("etlstage-batch-id " + testID + "\na\nb\n\x17etlstage-batch-id " + strings.Repeat("f", 32) + "\nc\n\x17")
	if err := Serve(w, in, out, batchEnv("1")); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{testID, "a", "b"}, {strings.Repeat("f", 32), "c"}}
	if !reflect.DeepEqual(w.got, want) || out.String() != "\x00\x00" {
		t.Fatalf("got %q, wrote %q", w.got, out.String())
	}
}

func TestWithoutBatchIDTheFirstMessageIsAMessage(t *testing.T) {
	w := &idCollect{}
	if err := Serve(w, strings.NewReader("etlstage-batch-id "+testID+"\na\n\x17"), &bytes.Buffer{}, batchEnv("")); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"", "etlstage-batch-id " + testID, "a"}}; !reflect.DeepEqual(w.got, want) {
		t.Fatalf("got %q", w.got)
	}
}

func TestABatchWithoutItsHeaderIsAViolation(t *testing.T) {
	w := &idCollect{}
	err := Serve(w, strings.NewReader("a\nb\n\x17"), &bytes.Buffer{}, batchEnv("1"))
	var pv *ProtocolViolation
	if !errors.As(err, &pv) || len(w.got) != 0 || ExitStatus(err) != 3 {
		t.Fatalf("got %v, loaded %q", err, w.got)
	}
}

func TestFileSinkCommitsABatchOnce(t *testing.T) {
	dir := t.TempDir()
	sink := FileSink{Dir: dir}
	if ok, err := sink.Commit(testID, [][]byte{[]byte("a"), []byte("b")}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := sink.Commit(testID, [][]byte{[]byte("a"), []byte("b")}); ok || err != nil {
		t.Fatal("committed twice", ok, err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "batch-"+testID+".txt"))
	entries, _ := os.ReadDir(dir)
	if string(data) != "a\nb\n" || len(entries) != 1 {
		t.Fatalf("%q, %d files", data, len(entries))
	}
	if _, err := sink.Commit("", nil); !errors.Is(err, ErrNoBatchID) {
		t.Fatal(err)
	}
}
