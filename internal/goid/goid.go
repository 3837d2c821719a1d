// Package goid tells which goroutine is running: the number the runtime prints at the
// head of a goroutine's stack trace ("goroutine 42 [running]:"). It is for diagnostics
// only (the advisory package's "waiting for a lock this goroutine holds" warning), never
// for behaviour: the runtime promises the number is unique among live goroutines, and
// nothing else.
package goid

import (
	"bytes"
	"runtime"
	"strconv"
)

// ID returns the running goroutine's number, or 0 if the runtime's trace header could not
// be read. It costs about a microsecond (one runtime.Stack of the caller alone).
func ID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if !ok {
		return 0
	}
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return id
}
