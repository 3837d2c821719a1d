package migrations_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// A span is when something was first and last seen.
type span struct{ first, last time.Time }

func (s *span) see(at time.Time) {
	if s.first.IsZero() {
		s.first = at
	}
	s.last = at
}

// A timeline is what a round's samples show, by the server's clock.
type timeline struct {
	work     map[int]*span       // worker: its work sessions
	held     map[int]*span       // worker: its holding of the lock
	lockPIDs map[uint32]int      // a worker's lock session (or one of its pool's sessions): pid to worker
	backends map[uint32]*backend // work session pid: what was seen of it
	overlaps []sample            // samples that show work sessions of two workers or more
	gap      time.Duration       // the longest time between two samples
}

type backend struct {
	worker int
	app    string
	span
}

func newTimeline(samples []sample) *timeline {
	tl := &timeline{work: map[int]*span{}, held: map[int]*span{}, lockPIDs: map[uint32]int{}, backends: map[uint32]*backend{}}
	for i, s := range samples {
		if i > 0 {
			tl.gap = max(tl.gap, s.at.Sub(samples[i-1].at))
		}
		if s.holder >= 0 {
			spanOf(tl.held, s.holder).see(s.at)
		}
		for pid, w := range s.lockPIDs {
			tl.lockPIDs[pid] = w
		}
		workers := map[int]bool{}
		for _, w := range s.work {
			workers[w.worker] = true
			spanOf(tl.work, w.worker).see(s.at)
			b := tl.backends[w.pid]
			if b == nil {
				b = &backend{worker: w.worker, app: w.app}
				tl.backends[w.pid] = b
			}
			b.see(s.at)
		}
		if len(workers) > 1 {
			tl.overlaps = append(tl.overlaps, s)
		}
	}
	return tl
}

func spanOf(m map[int]*span, k int) *span {
	if m[k] == nil {
		m[k] = &span{}
	}
	return m[k]
}

// nextHolder returns the worker that took the lock after victim first held it, or -1.
func (tl *timeline) nextHolder(victim int) int {
	next := -1
	v := tl.held[victim]
	for w, h := range tl.held {
		if w != victim && v != nil && h.first.After(v.first) && (next < 0 || h.first.Before(tl.held[next].first)) {
			next = w
		}
	}
	return next
}

// overlap is how long the victim's work sessions were seen after the next holder's first
// work session appeared (0 if they were gone before), and the time between the two when
// they were not.
func (tl *timeline) overlap(victim, next int) (overlap, between time.Duration) {
	v, n := tl.work[victim], tl.work[next]
	if v == nil || n == nil {
		return 0, 0
	}
	if d := v.last.Sub(n.first); d >= 0 {
		return d, 0
	}
	return 0, n.first.Sub(v.last)
}

// log reports the round's figures: all times from the moment the next holder took the
// lock.
func (tl *timeline) log(t *testing.T, victim, next int, rows []workRow, nextOut string) {
	t.Helper()
	if next < 0 || tl.held[next] == nil || tl.work[victim] == nil || tl.work[next] == nil {
		t.Logf("victim w%d; no takeover with work seen (next w%d)", victim, next)
		return
	}
	t0 := tl.held[next].first
	ms := func(at time.Time) string {
		return fmt.Sprintf("%+.0fms", float64(at.Sub(t0))/float64(time.Millisecond))
	}
	overlap, between := tl.overlap(victim, next)
	var committed []string
	for _, r := range rows {
		if workerOf(workName, r.app) == victim {
			committed = append(committed, fmt.Sprintf("v%d (ended %s)", r.version, ms(r.finished)))
		}
	}
	t.Logf("victim w%d SIGKILLed in migration 3; w%d took the lock at 0ms; victim's work last seen %s; "+
		"w%d's first work session %s; overlap %v, gap %v (samples at most %v apart); victim's commits: %s; w%d said: %s",
		victim, next, ms(tl.work[victim].last), next, ms(tl.work[next].first), overlap.Round(time.Millisecond),
		between.Round(time.Millisecond), tl.gap.Round(time.Millisecond), strings.Join(committed, ", "), next, drainLines(nextOut))
	t.Logf("work sessions seen (pid worker first..last): %s", tl.describeBackends(ms))
}

// describeBackends lists the work sessions seen, in the order they first appeared.
func (tl *timeline) describeBackends(ms func(time.Time) string) string {
	pids := make([]uint32, 0, len(tl.backends))
	for pid := range tl.backends {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return tl.backends[pids[i]].first.Before(tl.backends[pids[j]].first) })
	var b strings.Builder
	for _, pid := range pids {
		be := tl.backends[pid]
		fmt.Fprintf(&b, "%d w%d %s..%s; ", pid, be.worker, ms(be.first), ms(be.last))
	}
	return b.String()
}

var drainLine = regexp.MustCompile(`(?im)^.*drain.*$`)

// drainLines returns what a worker printed about its drain.
func drainLines(out string) string {
	lines := drainLine.FindAllString(out, -1)
	if len(lines) == 0 {
		return "(nothing about a drain)"
	}
	return strings.Join(lines, " | ")
}
