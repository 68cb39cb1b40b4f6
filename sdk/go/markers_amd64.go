//go:build amd64 && !purego

package worker

// Marker searches over whole buffers, one pass for several markers (markers_amd64.s):
// Go's standard library searches for one byte at a time at vector speed, and a
// result buffer would otherwise take four passes, the input three.

// level: 2 AVX-512BW, 1 AVX2, 0 neither (the plain passes)
var level = cpuLevel()

func cpuLevel() int

// indexAny3AVX2 and countAny4AVX2 look at the first len(b) &^ 31 bytes of b only.
//
//go:noescape
func indexAny3AVX2(b []byte, x, y, z byte) int

//go:noescape
func countAny4AVX2(b []byte, w, x, y, z byte) int

// indexAny3AVX512 and countAny4AVX512 look at the first len(b) &^ 63 bytes of b only.
//
//go:noescape
func indexAny3AVX512(b []byte, x, y, z byte) int

//go:noescape
func countAny4AVX512(b []byte, w, x, y, z byte) int

// indexAny3 returns the index of the first byte of b that is x, y or z, or -1.
func indexAny3(b []byte, x, y, z byte) int {
	if level == 0 || len(b) < 64 {
		return indexAny3Generic(b, x, y, z)
	}
	at, whole := 0, 0
	if level >= 2 {
		at, whole = indexAny3AVX512(b, x, y, z), len(b)&^63
	} else {
		at, whole = indexAny3AVX2(b, x, y, z), len(b)&^31
	}
	if at >= 0 {
		return at
	}
	if at := indexAny3Generic(b[whole:], x, y, z); at >= 0 {
		return whole + at
	}
	return -1
}

// countAny4 returns how many bytes of b are w, x, y or z.
func countAny4(b []byte, w, x, y, z byte) int {
	if level == 0 || len(b) < 64 {
		return countAny4Generic(b, w, x, y, z)
	}
	if level >= 2 {
		return countAny4AVX512(b, w, x, y, z) + countAny4Generic(b[len(b)&^63:], w, x, y, z)
	}
	return countAny4AVX2(b, w, x, y, z) + countAny4Generic(b[len(b)&^31:], w, x, y, z)
}
