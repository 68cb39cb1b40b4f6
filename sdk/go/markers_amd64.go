//go:build amd64 && !purego

package worker

// Marker searches over whole buffers, one pass for several markers (markers_amd64.s):
// Go's standard library searches for one byte at a time at vector speed, and a
// result buffer would otherwise take four passes, the input three.

var hasAVX2 = cpuHasAVX2()

func cpuHasAVX2() bool

// indexAny3AVX2 and countAny4AVX2 look at the first len(b) &^ 31 bytes of b only.
//
//go:noescape
func indexAny3AVX2(b []byte, x, y, z byte) int

//go:noescape
func countAny4AVX2(b []byte, w, x, y, z byte) int

// indexAny3 returns the index of the first byte of b that is x, y or z, or -1.
func indexAny3(b []byte, x, y, z byte) int {
	if !hasAVX2 || len(b) < 32 {
		return indexAny3Generic(b, x, y, z)
	}
	if at := indexAny3AVX2(b, x, y, z); at >= 0 {
		return at
	}
	whole := len(b) &^ 31
	if at := indexAny3Generic(b[whole:], x, y, z); at >= 0 {
		return whole + at
	}
	return -1
}

// countAny4 returns how many bytes of b are w, x, y or z.
func countAny4(b []byte, w, x, y, z byte) int {
	if !hasAVX2 || len(b) < 32 {
		return countAny4Generic(b, w, x, y, z)
	}
	whole := len(b) &^ 31
	return countAny4AVX2(b, w, x, y, z) + countAny4Generic(b[whole:], w, x, y, z)
}
