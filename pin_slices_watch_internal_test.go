package advisory

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The slices of waits share one timer (issue 47): a slice that hangs past its bound is
// still cancelled, though slices that ended before it set and stopped no timer of their
// own; a slice that ended is never cancelled; and a slice started while the timer is set
// for an older one leaves it alone, then gets it for its own deadline.
func TestSliceWatchCancelsAHungSliceAlone(t *testing.T) {
	var w sliceWatch
	defer w.stop()
	const bound = 300 * time.Millisecond
	ended, end := w.start(context.Background(), bound)
	end()
	require.ErrorIs(t, ended.Err(), context.Canceled, "ending a slice cancels its context, as a CancelFunc does")
	timer := w.timer
	start := time.Now()
	hung, endHung := w.start(context.Background(), bound)
	defer endHung()
	later, endLater := w.start(context.Background(), 10*bound)
	defer endLater()
	assert.Same(t, timer, w.timer, "one timer for every slice")
	select {
	case <-hung.Done():
		assert.GreaterOrEqual(t, time.Since(start), bound, "not before its deadline")
	case <-time.After(30 * time.Second):
		t.Fatal("a slice past its bound was not cancelled")
	}
	assert.NoError(t, later.Err(), "a slice within its bound runs on")
	w.mu.Lock()
	set, queued := w.set, len(w.queue)
	w.mu.Unlock()
	assert.True(t, set, "set again for the slice still running")
	assert.Equal(t, 1, queued)
}

// A parent's end reaches the slice at once, as a WithTimeout child's would.
func TestSliceWatchFollowsItsParent(t *testing.T) {
	var w sliceWatch
	defer w.stop()
	parent, cancel := context.WithCancel(context.Background())
	sctx, end := w.start(parent, time.Hour)
	defer end()
	cancel()
	<-sctx.Done()
	assert.ErrorIs(t, sctx.Err(), context.Canceled)
}
