// A pass-through T-worker on the Go SDK (bench/sdk_throughput.py).
package main

import "etlstage/worker"

func main() {
	worker.Main(worker.TransformFunc(func(msgs [][]byte) ([][]byte, error) { return msgs, nil }))
}
