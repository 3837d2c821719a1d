package sockwatch

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/leak"
)

// handler counts its events on a channel.
type handler chan struct{}

func (h handler) SocketEvent() { h <- struct{}{} }

func newHandler() handler { return make(handler, 4) }

// fired waits up to 10 s for h's event.
func (h handler) fired(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no event within 10s", what)
	}
}

// quiet checks that h sees no event for a while.
func (h handler) quiet(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h:
		t.Fatalf("%s: an event it was not waiting for", what)
	case <-time.After(50 * time.Millisecond):
	}
}

// socketPair returns the two ends of a connected Unix stream socket pair, closed when the
// test ends unless closed before (a second close of a number may hit a reused one, so the
// cleanup closes only what the test left open).
func socketPair(t *testing.T) (mine, peer int, closePeer func()) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		syscall.Close(fds[0])
		if !closed {
			syscall.Close(fds[1])
		}
	})
	return fds[0], fds[1], func() { closed = true; syscall.Close(fds[1]) }
}

func newWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := New()
	require.NoError(t, err)
	require.NotNil(t, w)
	t.Cleanup(w.Stop)
	return w
}

// Registration IDs are 64-bit and never reused: a registration whose ID has the same low
// 32 bits as a long-lived one's (the int32 IDs of old wrapped there and overwrote it) is
// watched separately, and every event reaches its own handler. (Once a root test,
// TestPollerIDsNeverCollide, with held locks whose backends were terminated.)
func TestIDsNeverCollide(t *testing.T) {
	w := newWatcher(t)
	w.mu.Lock()
	w.next = 1<<32 - 2 // the next IDs cross the 32-bit boundary
	w.mu.Unlock()
	type watched struct {
		h     handler
		reg   Registration
		close func()
	}
	add := func() *watched {
		fd, _, closePeer := socketPair(t)
		h := newHandler()
		reg, err := w.Add(fd, h)
		require.NoError(t, err)
		t.Cleanup(func() { w.Remove(&reg) })
		return &watched{h, reg, closePeer}
	}
	long, across := add(), add()
	require.Equal(t, uint64(1<<32-1), long.reg.id)
	require.Equal(t, uint64(1<<32), across.reg.id)

	w.mu.Lock()
	w.next = long.reg.id + 1<<32 - 1 // the next ID's low 32 bits are long's
	w.mu.Unlock()
	twin := add()
	require.Equal(t, uint32(long.reg.id), uint32(twin.reg.id))

	long.close()
	long.h.fired(t, "the long-lived registration")
	twin.h.quiet(t, "the registration with the same low 32 bits, its peer still open")
	twin.close()
	twin.h.fired(t, "the registration with the same low 32 bits")
	across.close()
	across.h.fired(t, "the registration past the boundary")
	long.h.quiet(t, "the long-lived registration, fired already: one-shot")
}

// Add fires on input and on a hang-up, once; after Remove, nothing; the zero
// Registration's Remove does nothing, on a nil Watcher too.
func TestAddIsOneShotAndRemoveStopsIt(t *testing.T) {
	w := newWatcher(t)
	fd, peer, closePeer := socketPair(t)
	h := newHandler()
	reg, err := w.Add(fd, h)
	require.NoError(t, err)
	h.quiet(t, "idle")
	_, err = syscall.Write(peer, []byte("x"))
	require.NoError(t, err)
	h.fired(t, "input")
	_, err = syscall.Write(peer, []byte("y"))
	require.NoError(t, err)
	h.quiet(t, "one-shot: the second input")
	w.Remove(&reg)
	require.Equal(t, Registration{}, reg)
	w.Remove(&reg)
	(*Watcher)(nil).Remove(&reg)

	reg, err = w.Add(fd, h) // input is pending: at once
	require.NoError(t, err)
	h.fired(t, "pending input")
	w.Remove(&reg)
	var b [2]byte
	_, err = syscall.Read(fd, b[:])
	require.NoError(t, err)
	reg, err = w.Add(fd, h)
	require.NoError(t, err)
	w.Remove(&reg)
	closePeer()
	h.quiet(t, "removed before the hang-up")
	_, err = w.Add(-1, h)
	require.Error(t, err)
}

// AddHangup ignores input, which the caller reads, and fires when the peer goes away.
func TestAddHangupIgnoresInput(t *testing.T) {
	w := newWatcher(t)
	fd, peer, closePeer := socketPair(t)
	h := newHandler()
	reg, err := w.AddHangup(fd, h)
	require.NoError(t, err)
	defer w.Remove(&reg)
	_, err = syscall.Write(peer, []byte("x"))
	require.NoError(t, err)
	h.quiet(t, "input")
	closePeer()
	h.fired(t, "hang-up")
}

// Stop ends the goroutine; a stopped Watcher refuses registrations made through a table
// it no longer has (see failAll).
func TestStopEndsTheGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	w, err := New()
	require.NoError(t, err)
	w.Stop()
	leak.Goroutines(t, before)
	w2 := newWatcher(t)
	w2.failAll()
	fd, _, _ := socketPair(t)
	_, err = w2.Add(fd, newHandler())
	require.Error(t, err)
}

// Move hands a registration that has not fired to another handler; one that fired stays
// fired.
func TestMoveHandsTheRegistrationOn(t *testing.T) {
	w := newWatcher(t)
	fd, peer, _ := socketPair(t)
	first, second := newHandler(), newHandler()
	reg, err := w.Add(fd, first)
	require.NoError(t, err)
	require.True(t, w.Move(reg, second))
	_, err = syscall.Write(peer, []byte("x"))
	require.NoError(t, err)
	second.fired(t, "input, after the move")
	first.quiet(t, "moved away")
	require.False(t, w.Move(reg, first), "a registration that fired")
	w.Remove(&reg)
	require.False(t, w.Move(reg, first), "the zero Registration")
}
