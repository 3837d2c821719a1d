package advisory

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingConn is an interrupter that counts its interrupts, and closes hit at the first.
type countingConn struct {
	n    atomic.Int32
	once sync.Once
	hit  chan struct{}
}

func newCountingConn() *countingConn { return &countingConn{hit: make(chan struct{})} }

func (c *countingConn) Interrupt() {
	c.n.Add(1)
	c.once.Do(func() { close(c.hit) })
}

// The slices of waits share one timer (issue 47): a slice that hangs past its bound is
// still interrupted, though slices that ended before it set and stopped no timer of their
// own; a slice that ended is never interrupted; and a slice started while the timer is
// set for an older one leaves it alone, then gets it for its own deadline.
func TestSliceWatchInterruptsAHungSliceAlone(t *testing.T) {
	var w sliceWatch
	defer w.stop()
	const bound = 300 * time.Millisecond
	endedConn := newCountingConn()
	require.False(t, w.end(w.start(bound, endedConn)), "a slice ended at once was not interrupted")
	timer := w.timer
	start := time.Now()
	hungConn, laterConn := newCountingConn(), newCountingConn()
	hung := w.start(bound, hungConn)
	later := w.start(10*bound, laterConn)
	assert.Same(t, timer, w.timer, "one timer for every slice")
	select {
	case <-hungConn.hit:
		assert.GreaterOrEqual(t, time.Since(start), bound, "not before its deadline")
	case <-time.After(30 * time.Second):
		t.Fatal("a slice past its bound was not interrupted")
	}
	assert.True(t, w.end(hung), "its end says it was interrupted")
	assert.EqualValues(t, 1, hungConn.n.Load(), "interrupted once")
	assert.Zero(t, endedConn.n.Load(), "the slice that ended was never interrupted")
	assert.Zero(t, laterConn.n.Load(), "a slice within its bound runs on")
	w.mu.Lock()
	set, queued := w.set, len(w.queue)
	w.mu.Unlock()
	assert.True(t, set, "set again for the slice still running")
	assert.Equal(t, 1, queued)
	assert.False(t, w.end(later))
}

// A slice's end and the timer's firing race: whichever comes first decides, and the end
// says which. An interrupt after the end would strike the connection's next statement
// (its owner settles the interrupt once, after the end), so every interrupt of a slice
// comes before its end returns, and one whose end said "not interrupted" has none. Slices
// whose bound ends as they end, many times over, from several goroutines.
func TestSliceWatchNeverInterruptsAnEndedSlice(t *testing.T) {
	var w sliceWatch
	defer w.stop()
	const goroutines, slices = 4, 300
	type outcome struct {
		c           *countingConn
		interrupted bool
		atEnd       int32 // interrupts when end returned
	}
	results := make(chan outcome, goroutines*slices)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < slices; i++ {
				c := newCountingConn()
				e := w.start(time.Duration(i%7)*100*time.Microsecond, c)
				time.Sleep(time.Duration(i%5) * 100 * time.Microsecond)
				interrupted := w.end(e)
				results <- outcome{c, interrupted, c.n.Load()}
			}
		}()
	}
	wg.Wait()
	close(results)
	time.Sleep(50 * time.Millisecond) // time for a late interrupt to show
	var interrupted, not int
	for r := range results {
		assert.Equal(t, r.atEnd, r.c.n.Load(), "interrupted after its end (it would strike the next statement)")
		if r.interrupted {
			interrupted++
			assert.EqualValues(t, 1, r.atEnd, "an interrupted slice is interrupted once, before its end returns")
		} else {
			not++
			assert.Zero(t, r.atEnd, "a slice whose end said not interrupted was interrupted")
		}
	}
	t.Logf("%d slices interrupted, %d not", interrupted, not)
	assert.Positive(t, interrupted, "the timer fired for some")
	assert.Positive(t, not, "some ended first")
}
