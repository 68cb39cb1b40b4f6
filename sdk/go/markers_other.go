//go:build !amd64 || purego

package worker

var level = 0

func cpuLevel() int { return 0 }

func indexAny3(b []byte, x, y, z byte) int    { return indexAny3Generic(b, x, y, z) }
func countAny4(b []byte, w, x, y, z byte) int { return countAny4Generic(b, w, x, y, z) }
