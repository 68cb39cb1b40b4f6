// upper: a T-worker with the etlstage Go SDK: uppercases a-z, every other byte unchanged
// (UTF-8 stays UTF-8). Works in every T mode: single, batch, worker-driven.
package main

import "etlstage/worker"

func main() {
	worker.Main(worker.TransformFunc(func(msgs [][]byte) ([][]byte, error) {
		out := make([][]byte, len(msgs))
		for i, m := range msgs {
			r := make([]byte, len(m)) // a copy: m is valid only during the call
			for j, c := range m {
				if c >= 'a' && c <= 'z' {
					c -= 'a' - 'A'
				}
				r[j] = c
			}
			out[i] = r
		}
		return out, nil
	}))
}
