package worker

import (
	"bytes"
	"io"
	"testing"
)

// go test -bench . -benchmem: a pass-through transformer over 100-byte messages.
func benchServe(b *testing.B, env map[string]string, input []byte) {
	pass := TransformFunc(func(m [][]byte) ([][]byte, error) { return m, nil })
	b.SetBytes(int64(len(input)))
	for i := 0; i < b.N; i++ {
		if err := Serve(pass, bytes.NewReader(input), io.Discard, func(k string) string { return env[k] }); err != nil {
			b.Fatal(err)
		}
	}
}

func benchInput(batch int) []byte {
	msg := bytes.Repeat([]byte("0123456789"), 10)
	var in []byte
	for i := 1; i <= 100000; i++ {
		in = append(append(in, msg...), '\n')
		if batch > 0 && i%batch == 0 {
			in = append(in, 0x17)
		}
	}
	return in
}

func BenchmarkSingle(b *testing.B) {
	benchServe(b, map[string]string{"ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": "single"}, benchInput(0))
}

func BenchmarkBatch(b *testing.B) {
	env := map[string]string{"ETLSTAGE_TYPE": "T", "ETLSTAGE_MODE": "batch", "ETLSTAGE_BATCH_SIZE": "1000"}
	benchServe(b, env, benchInput(1000))
}
