// A pass-through T-worker written by hand in Go, the baseline of bench/sdk_throughput.py.
// It does what the SDK does for it: markers and mode from ETLSTAGE_*, messages split with
// bytes.IndexByte (each read appended to the unfinished message), each message (single mode) or batch (supervisor-driven) handed to
// transform, the results framed through a bufio.Writer flushed once per read.
package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strconv"
)

func marker(name string, dflt byte) byte {
	if v := os.Getenv("ETLSTAGE_" + name); v != "" {
		n, err := strconv.ParseUint(v, 16, 8)
		if err != nil {
			os.Exit(2)
		}
		return byte(n)
	}
	return dflt
}

func transform(msgs [][]byte) [][]byte { return msgs }

func main() {
	eom, eop, eob := marker("EOM", '\n'), marker("EOP", 0), marker("EOB", 0x17)
	batchMode := os.Getenv("ETLSTAGE_MODE") == "batch"
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	answer := func(msgs [][]byte) {
		for _, r := range transform(msgs) {
			out.Write(r)
			out.WriteByte(eom)
		}
		out.WriteByte(eop)
	}
	buf := make([]byte, 1<<20)
	held := 0 // an unfinished message at the front of buf; the next read appends to it
	var batch [][]byte
	one := make([][]byte, 1)
	owned := 0
	for {
		if held == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		n, err := os.Stdin.Read(buf[held:])
		if n > 0 {
			data := buf[:held+n]
			pos, b := 0, -1 // b: the next EOB, found again once passed
			if batchMode {
				b = bytes.IndexByte(data, eob)
			}
			for {
				if b >= 0 && b < pos {
					if b = bytes.IndexByte(data[pos:], eob); b >= 0 {
						b += pos
					}
				}
				m := bytes.IndexByte(data[pos:], eom)
				if m >= 0 {
					m += pos
				}
				if m < 0 && b < 0 {
					break
				}
				if b >= 0 && (m < 0 || b < m) {
					answer(batch)
					batch, owned = batch[:0], 0
					pos = b + 1
				} else {
					if batchMode {
						batch = append(batch, data[pos:m])
					} else {
						one[0] = data[pos:m]
						answer(one)
					}
					pos = m + 1
				}
			}
			for i := owned; i < len(batch); i++ { // the read buffer is reused: keep copies
				batch[i] = bytes.Clone(batch[i])
			}
			owned = len(batch)
			held = copy(buf, data[pos:])
			out.Flush()
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			os.Exit(1)
		}
	}
}
