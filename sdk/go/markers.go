package worker

import "bytes"

// indexAny3Generic: indexAny3 with one bytes.IndexByte pass per byte.
func indexAny3Generic(b []byte, x, y, z byte) int {
	first := -1
	for _, c := range [3]byte{x, y, z} {
		if at := bytes.IndexByte(b, c); at >= 0 && (first < 0 || at < first) {
			first = at
			b = b[:at] // a later hit must come before this one
		}
	}
	return first
}

// countAny4Generic: countAny4 with one bytes.Count pass per distinct byte.
func countAny4Generic(b []byte, w, x, y, z byte) int {
	n := 0
	set := [4]byte{w, x, y, z}
	for i, c := range set {
		if (i > 0 && c == set[0]) || (i > 1 && c == set[1]) || (i > 2 && c == set[2]) {
			continue
		}
		n += bytes.Count(b, []byte{c})
	}
	return n
}
