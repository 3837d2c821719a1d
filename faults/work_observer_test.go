package faults_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// workObserver samples pg_stat_activity every few milliseconds, from its own connection,
// for sessions whose application_name carries a work tag ("pgadv/...", or the untagged
// control's "pgadv-untagged/..."), and keeps, per
// session, when it was seen, on the server's clock. A sample is one statement, so one
// snapshot of pg_stat_activity, taken at an unknown moment between the sample's begin and
// end clock rows (see workSample). Hence, for a session:
//   - aliveAt: the begin of the last sample that listed it; it was running at or after
//     this time (a lower bound of its last moment);
//   - goneBy: the end of the first later sample that did not list it; it had ended by
//     this time (an upper bound; zero if no such sample came).
type workObserver struct {
	mu      sync.Mutex
	spans   map[spanKey]*workSpan
	begun   time.Time // the begin of the sample being read, or of the last one
	samples int
	maxGap  time.Duration // the longest time between two samples' ends
	ended   time.Time     // the end of the last sample
	err     error         // why sampling stopped before stop was called
	cancel  context.CancelFunc
	done    chan struct{}
}

// workSpan is one session as the observer saw it (see workObserver).
type workSpan struct {
	pid                    uint32
	app                    string
	first, aliveAt, goneBy time.Time
}

// spanKey tells sessions apart: a pid can be reused, with another application_name.
type spanKey struct {
	pid uint32
	app string
}

// workSample lists the tagged sessions between two clock rows (pid 0): the parts of a
// UNION ALL run in order, so pg_stat_activity is read after the first clock row is made
// and before the last.
const workSample = `SELECT 0, 'begin', clock_timestamp()
	UNION ALL SELECT pid, application_name, clock_timestamp() FROM pg_stat_activity
	  WHERE starts_with(application_name, 'pgadv')
	UNION ALL SELECT 0, 'end', clock_timestamp()`

func startWorkObserver(t *testing.T) *workObserver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	o := &workObserver{spans: map[spanKey]*workSpan{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		defer conn.Release()
		for ctx.Err() == nil {
			rows, err := conn.Query(ctx, workSample)
			if err == nil {
				for rows.Next() {
					var pid uint32
					var app string
					var at time.Time
					if err = rows.Scan(&pid, &app, &at); err != nil {
						break
					}
					o.add(pid, app, at)
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
			if err != nil && ctx.Err() == nil {
				o.fail(err)
				return
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	t.Cleanup(o.stop)
	return o
}

// add records one row of a sample.
func (o *workObserver) add(pid uint32, app string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case pid == 0 && app == "begin":
		o.begun = at
	case pid == 0:
		o.endSample(at)
	default:
		sp, ok := o.spans[spanKey{pid, app}]
		if !ok {
			sp = &workSpan{pid: pid, app: app, first: o.begun}
			o.spans[spanKey{pid, app}] = sp
		}
		sp.aliveAt, sp.goneBy = o.begun, time.Time{}
	}
}

// endSample marks the sessions this sample no longer lists as gone by its end.
func (o *workObserver) endSample(at time.Time) {
	for _, sp := range o.spans {
		if sp.goneBy.IsZero() && sp.aliveAt.Before(o.begun) {
			sp.goneBy = at
		}
	}
	o.samples++
	if !o.ended.IsZero() {
		o.maxGap = max(o.maxGap, at.Sub(o.ended))
	}
	o.ended = at
}

func (o *workObserver) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.err = err
}

// sampledPast fails the test unless the observer kept sampling without error until a
// sample that began after at: otherwise the absence of a session from its samples says
// nothing about that time.
func (o *workObserver) sampledPast(t *testing.T, at time.Time) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	require.NoError(t, o.err, "the observer's sampling failed")
	require.True(t, o.begun.After(at), "the observer's last sample began at %v, not after %v", o.begun, at)
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
