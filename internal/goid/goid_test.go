package goid_test

import (
	"testing"

	"github.com/pgadvisory/advisory/internal/goid"
)

// TestIDTellsGoroutinesApart: the same goroutine gets the same non-zero number each time,
// another goroutine another one.
func TestIDTellsGoroutinesApart(t *testing.T) {
	me := goid.ID()
	if me == 0 || goid.ID() != me {
		t.Fatalf("ID() = %d, then %d", me, goid.ID())
	}
	other := make(chan uint64)
	go func() { other <- goid.ID() }()
	if o := <-other; o == 0 || o == me {
		t.Fatalf("another goroutine's ID() = %d, this one's %d", o, me)
	}
}
