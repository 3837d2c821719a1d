package faults_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// workSpan is one server session of a holding's work as the observer saw it, on the
// server's clock: first and last are the times of the first and last sample that listed it.
type workSpan struct {
	pid         uint32
	app         string
	first, last time.Time
}

// workObserver samples pg_stat_activity every few milliseconds, from its own connection,
// for sessions whose application_name carries a work tag ("pgadv/..."), and keeps the
// span each was seen for. The time of a sample is clock_timestamp() evaluated per row,
// after the statement has read pg_stat_activity: a session listed at time T was running
// at some moment no later than T, so "last seen before X" is a safe claim.
type workObserver struct {
	mu      sync.Mutex
	spans   map[spanKey]*workSpan
	samples int
	maxGap  time.Duration // the longest time between two samples, server clock
	cancel  context.CancelFunc
	done    chan struct{}
}

// workSample lists the tagged sessions; one statement, so one pg_stat_activity snapshot.
const workSample = `SELECT pid, application_name, clock_timestamp() FROM pg_stat_activity
	WHERE starts_with(application_name, 'pgadv/') UNION ALL SELECT 0, '', clock_timestamp()`

func startWorkObserver(t *testing.T) *workObserver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	o := &workObserver{spans: map[spanKey]*workSpan{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		defer conn.Release()
		var prev time.Time
		for ctx.Err() == nil {
			rows, err := conn.Query(ctx, workSample)
			if err != nil {
				return
			}
			for rows.Next() {
				var s workSpan
				if rows.Scan(&s.pid, &s.app, &s.last) == nil {
					prev = o.add(s, prev)
				}
			}
			rows.Close()
			time.Sleep(3 * time.Millisecond)
		}
	}()
	t.Cleanup(o.stop)
	return o
}

// add records one row; pid 0 is the sample's own clock row.
func (o *workObserver) add(s workSpan, prev time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s.pid == 0 {
		o.samples++
		if !prev.IsZero() {
			o.maxGap = max(o.maxGap, s.last.Sub(prev))
		}
		return s.last
	}
	k := spanKey{s.pid, s.app}
	if sp, ok := o.spans[k]; ok {
		sp.last = s.last
		return prev
	}
	s.first = s.last
	o.spans[k] = &s
	return prev
}

// spanKey tells sessions apart: a pid can be reused, with another application_name.
type spanKey struct {
	pid uint32
	app string
}

// stop ends the sampling and waits for it; it may be called more than once.
func (o *workObserver) stop() {
	o.cancel()
	<-o.done
}

// tagged returns the spans of sessions whose application_name starts with tag.
func (o *workObserver) tagged(tag string) []workSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []workSpan
	for _, s := range o.spans {
		if strings.HasPrefix(s.app, tag) {
			out = append(out, *s)
		}
	}
	return out
}
