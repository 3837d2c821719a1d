package migrations_test

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// Worker names. Worker i's work sessions end their application_name with "e2e.wI" (the
// PGAPPNAME the test gives it, after run's tag); its lock session shows "lock.wI".
var (
	workName = regexp.MustCompile(`e2e\.w([0-9]+)$`)
	lockName = regexp.MustCompile(`lock\.w([0-9]+)`)
)

// workerOf returns the worker number in an application_name matched by re, or -1.
func workerOf(re *regexp.Regexp, app string) int {
	m := re.FindStringSubmatch(app)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// A sample is one look at the server: one statement, so pg_stat_activity is one snapshot.
type sample struct {
	at         time.Time      // the server's clock at the statement's start
	holder     int            // the worker whose session holds the round's lock, -1 for none
	work       []workSeen     // the workers' work sessions
	holderApps string         // every holder's application_name, comma-separated (more than one is a bug)
	lockPIDs   map[uint32]int // the workers' lock sessions (the pool's sessions of a holder process): pid to worker
}

type workSeen struct {
	pid       uint32
	worker    int
	app       string
	waitEvent string
}

// An observer samples, every few milliseconds on a connection of its own, the round
// database's work sessions (pg_stat_activity) and the holder of the round's lock
// (pg_locks), by the server's clock, until stop.
type observer struct {
	mu      sync.Mutex
	samples []sample
	err     error
	stop    chan struct{}
	done    chan struct{}
}

// observeSQL takes one sample: $1 is the database, $2 and $3 pg_locks' classid and objid
// of the lock's key.
const observeSQL = `
SELECT statement_timestamp(),
  coalesce((SELECT string_agg(b.application_name, ',') FROM pg_locks l JOIN pg_stat_activity b ON b.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.database = d.oid
      AND l.classid = $2 AND l.objid = $3 AND l.objsubid = 1), ''),
  coalesce(array_agg(a.pid ORDER BY a.pid) FILTER (WHERE a.pid IS NOT NULL), '{}'),
  coalesce(array_agg(a.application_name ORDER BY a.pid) FILTER (WHERE a.pid IS NOT NULL), '{}'),
  coalesce(array_agg(coalesce(a.wait_event, '') ORDER BY a.pid) FILTER (WHERE a.pid IS NOT NULL), '{}'),
  coalesce((SELECT array_agg(b.pid ORDER BY b.pid) FROM pg_stat_activity b
    WHERE b.datid = d.oid AND b.application_name ~ 'lock\.w[0-9]+'), '{}'),
  coalesce((SELECT array_agg(b.application_name ORDER BY b.pid) FROM pg_stat_activity b
    WHERE b.datid = d.oid AND b.application_name ~ 'lock\.w[0-9]+'), '{}')
FROM pg_database d LEFT JOIN pg_stat_activity a ON a.datid = d.oid AND a.application_name ~ 'e2e\.w[0-9]+$'
WHERE d.datname = $1
GROUP BY d.oid`

func startObserver(t *testing.T, db, lock string) *observer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn := adminConn(t, ctx)
	key := uint64(advisory.KeyOf(lock))
	o := &observer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		defer cancel()
		for {
			s, err := takeSample(ctx, conn, db, uint32(key>>32), uint32(key))
			o.mu.Lock()
			o.samples = append(o.samples, s)
			if err != nil && o.err == nil {
				o.err = err
			}
			o.mu.Unlock()
			select {
			case <-o.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(o.finish)
	return o
}

func takeSample(ctx context.Context, conn *pgx.Conn, db string, classid, objid uint32) (sample, error) {
	var s sample
	var pids, lockPIDs []int32
	var apps, waits, lockApps []string
	err := conn.QueryRow(ctx, observeSQL, db, classid, objid).Scan(&s.at, &s.holderApps, &pids, &apps, &waits,
		&lockPIDs, &lockApps)
	if err != nil {
		return s, err
	}
	s.holder = workerOf(lockName, s.holderApps)
	s.lockPIDs = map[uint32]int{}
	for i, pid := range lockPIDs {
		s.lockPIDs[uint32(pid)] = workerOf(lockName, lockApps[i])
	}
	for i, pid := range pids {
		s.work = append(s.work, workSeen{pid: uint32(pid), worker: workerOf(workName, apps[i]), app: apps[i], waitEvent: waits[i]})
	}
	return s, nil
}

// last returns the newest sample, if any.
func (o *observer) last() (sample, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.samples) == 0 {
		return sample{}, false
	}
	return o.samples[len(o.samples)-1], true
}

// finish stops the sampling (once) and returns what was seen.
func (o *observer) finish() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	<-o.done
}

// result stops the observer and returns its samples; a failed sample fails t.
func (o *observer) result(t *testing.T) []sample {
	t.Helper()
	o.finish()
	require.NoError(t, o.err, "observer")
	return o.samples
}
