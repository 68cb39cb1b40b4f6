package worker

import (
	"math/rand"
	"testing"
)

// The one-pass searches against the plain ones, at each level the CPU allows, on every
// length up to 700 bytes and every position of a hit (the vector code handles blocks of
// 64 or 32 bytes and a tail).
func TestMarkerSearches(t *testing.T) {
	defer func(l int) { level = l }(level)
	for level = cpuLevel(); level >= 0; level-- {
		testMarkerSearches(t)
	}
}

func testMarkerSearches(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	const w, x, y, z = '\n', 0, 0x17, 0x06
	for n := 0; n <= 700; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(rnd.Intn(26))
		}
		check := func() {
			t.Helper()
			if got, want := indexAny3(b, x, y, z), indexAny3Generic(b, x, y, z); got != want {
				t.Fatalf("indexAny3 of %d bytes: %d, want %d", n, got, want)
			}
			if got, want := countAny4(b, w, x, y, z), countAny4Generic(b, w, x, y, z); got != want {
				t.Fatalf("countAny4 of %d bytes: %d, want %d", n, got, want)
			}
		}
		check()
		for i := 0; i < n; i += 1 + rnd.Intn(7) {
			old := b[i]
			b[i] = [4]byte{w, x, y, z}[rnd.Intn(4)]
			check()
			if rnd.Intn(3) > 0 {
				b[i] = old
			}
		}
	}
	// Over 255 blocks of 32 bytes, the count's byte lanes are summed along the way.
	b := make([]byte, 1<<20+13)
	for i := range b {
		b[i] = byte(rnd.Intn(256))
	}
	if got, want := countAny4(b, w, x, y, z), countAny4Generic(b, w, x, y, z); got != want {
		t.Fatalf("countAny4 of 1 MiB: %d, want %d", got, want)
	}
	if level == cpuLevel() {
		t.Logf("searches of level %d (2 AVX-512BW, 1 AVX2, 0 plain) and below tested", level)
	}
}
