// Package leak checks that tests leave no goroutines behind.
package leak

import (
	"runtime"
	"time"
)

// TB is the part of testing.TB that Goroutines uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Goroutines fails t unless the number of goroutines falls back to before within 5 s. It
// polls in a plain loop: a helper goroutine (as testify's Eventually uses) would count.
func Goroutines(t TB, before int) {
	t.Helper()
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); after > before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	if after > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}
