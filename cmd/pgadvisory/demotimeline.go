package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgadvisory/advisory"
)

// The demo acts on what its workers print (a SIGKILL, a pg_terminate_backend) and says in
// plain words what their lines mean. It reads the lines of run (see run.go, runacquire.go
// and drain.go) and of demo-migrate.

// drainMarker starts the session part of run's report of a drained session (reportDrain).
const drainMarker = "an earlier holder's session was still running: backend pid "

// react acts on one line of a worker and explains it. ev has been printed.
func (d *demo) react(ctx context.Context, ev event) error {
	s := &d.seen
	switch t := ev.text; {
	case strings.HasPrefix(t, "migration started"):
		s.holders++
		var proc int
		if _, err := fmt.Sscanf(t, "migration started (process %d, backend pid %d)", &proc, &ev.worker.backend); err == nil {
			s.backends[ev.worker.backend] = ev.worker.name
		}
	case strings.HasPrefix(t, "acquired lock") && !s.killedAt.IsZero() && s.takeover == 0:
		s.takeover = ev.at.Sub(s.killedAt)
		d.say("demo", fmt.Sprintf("→ %s holds the lock %s after the SIGKILL", ev.worker.name, fmtDur(s.takeover)))
	case strings.Contains(t, drainMarker):
		d.explainDrain(ev)
	case t == fmt.Sprintf("step %d/%d done, not committed yet", demoSlowStep-1, demoSteps) && s.holders == 1:
		d.kill(ctx, ev.worker)
	case t == fmt.Sprintf("step %d/%d done, not committed yet", demoSlowStep-1, demoSteps) && s.holders == 2:
		return d.terminate(ctx, ev.worker)
	case strings.Contains(t, "lost while the command ran") && !s.terminatedAt.IsZero():
		s.told = ev.at.Sub(s.terminatedAt)
		d.say("demo", fmt.Sprintf("→ %s was told %s after the terminate, stopped its migration, and exits 76", ev.worker.name, fmtDur(s.told)))
	}
	return nil
}

// kill SIGKILLs w's pgadvisory once w's migration runs its slow step on the server: its
// backend is then inside a statement, and outlives its client until the next holder drains
// it. (Killed between two statements, the backend would notice at once and end by itself.)
func (d *demo) kill(ctx context.Context, w *demoWorker) {
	d.awaitActive(ctx, w.backend)
	d.seen.killedAt, d.seen.killed = time.Now(), w.name
	syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	d.say("demo", fmt.Sprintf("SIGKILL %s's pgadvisory (process %d) during migration step %d: the kernel kills "+
		"the migration too, and PostgreSQL frees the lock once both are gone; but backend %d goes on with the "+
		"step, in a transaction nobody will commit", w.name, w.cmd.Process.Pid, demoSlowStep, w.backend))
}

// terminate ends the lock holder's session with pg_terminate_backend once w's migration
// runs its slow step, as kill does.
func (d *demo) terminate(ctx context.Context, w *demoWorker) error {
	d.awaitActive(ctx, w.backend)
	d.seen.terminatedAt = time.Now()
	pid, err := d.terminateHolder(ctx)
	if err != nil {
		return err
	}
	d.say("demo", fmt.Sprintf("pg_terminate_backend(%d) during migration step %d: the server ends %s's lock session "+
		"(backend pid %d) under it", pid, demoSlowStep, w.name, pid))
	return nil
}

// awaitActive waits (up to 5 s) until backend pid runs a statement.
func (d *demo) awaitActive(ctx context.Context, pid uint32) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		var active bool
		err := d.admin.QueryRow(ctx, "SELECT state OPERATOR(pg_catalog.=) 'active' FROM pg_catalog.pg_stat_activity "+
			"WHERE pid OPERATOR(pg_catalog.=) $1", int32(pid)).Scan(&active)
		if err != nil || active {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startWorkers starts the workers while the demo holds the lock, one at a time, each
// once the one before it waits for the lock, then lets go: PostgreSQL grants a lock to
// its waiters in turn, so worker-1 holds it first, and the timeline is read as it
// happens from then on.
func (d *demo) startWorkers(ctx context.Context) error {
	hi, lo := demoLockKey()
	key := int64(uint64(hi)<<32 | uint64(lo))
	// A session of its own holds the lock: the demo's queries on d.admin would otherwise
	// move the holder's state_change, and the workers' "held for ..." with it.
	hold, err := pgx.ConnectConfig(ctx, d.admin.Config())
	if err != nil {
		return err
	}
	defer hold.Close(context.Background())
	if _, err := hold.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock($1)", key); err != nil {
		return err
	}
	d.say("demo", `holds lock "migrations" while the workers start, so that they queue in order`)
	for i := 1; i <= 3; i++ {
		if err := d.startWorker(fmt.Sprintf("worker-%d", i)); err != nil {
			return err
		}
		if err := d.awaitLockers(ctx, d.workers[i-1], i+1); err != nil {
			return err
		}
	}
	_, err = hold.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock($1)", key)
	d.say("demo", `releases lock "migrations": the workers get it in turn`)
	return err
}

// awaitLockers waits (up to 30 s) until n sessions hold or wait for the lock, the last of
// them w's, and prints what the workers say meanwhile.
func (d *demo) awaitLockers(ctx context.Context, w *demoWorker, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hi, lo := demoLockKey()
	for {
		var count int
		err := d.admin.QueryRow(ctx, demoLockRowsSQL, hi, lo).Scan(&count)
		if err != nil {
			return fmt.Errorf("wait for %s to queue for the lock: %w", w.name, err)
		}
		if count >= n {
			return nil
		}
		select {
		case ev := <-d.events: // a worker's "waiting for lock" line
			if ev.text == "" {
				return fmt.Errorf("%s exited before the workers were all queued: %s",
					ev.worker.name, exitDescription(ev.worker.cmd.ProcessState))
			}
			d.say(ev.worker.name, ev.text)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// demoLockRowsSQL counts the sessions that hold or wait for the demo's lock, and
// demoHolderSQL finds its holder. As every statement the CLI sends itself, they name the
// server's relations, functions and operators with their schema (pg_catalog.): a function
// or operator of the same name earlier in the search_path never runs instead
// (CVE-2018-1058).
const (
	demoLockRowsSQL = `SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks
		WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND objsubid OPERATOR(pg_catalog.=) 1
		AND classid OPERATOR(pg_catalog.=) $1 AND objid OPERATOR(pg_catalog.=) $2`
	demoHolderSQL = `SELECT pid FROM pg_catalog.pg_locks
		WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND granted AND objsubid OPERATOR(pg_catalog.=) 1
		AND classid OPERATOR(pg_catalog.=) $1 AND objid OPERATOR(pg_catalog.=) $2`
)

// terminateHolder terminates the session that holds the lock, and returns its pid.
func (d *demo) terminateHolder(ctx context.Context) (uint32, error) {
	var pid uint32
	hi, lo := demoLockKey()
	err := d.admin.QueryRow(ctx, demoHolderSQL, hi, lo).Scan(&pid)
	if err != nil {
		return 0, fmt.Errorf("find the holder: %w", err)
	}
	_, err = d.admin.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", int32(pid))
	return pid, err
}

// demoLockKey is the workers' lock as pg_locks shows it (classid, objid).
func demoLockKey() (hi, lo uint32) {
	key := uint64(advisory.KeyOf("migrations"))
	return uint32(key >> 32), uint32(key)
}

// explainDrain says what run's report of a drained session means: whose migration it
// was, and that its transaction will never commit.
func (d *demo) explainDrain(ev event) {
	_, rest, _ := strings.Cut(ev.text, drainMarker)
	var pid uint32
	fmt.Sscanf(rest, "%d", &pid)
	outcome := rest[strings.LastIndex(rest, "): ")+3:] // the application_name is quoted before it
	owner, ok := d.seen.backends[pid]
	if !ok {
		owner = "an earlier holder"
	}
	if strings.HasPrefix(outcome, "still running") {
		d.say("demo", fmt.Sprintf("→ %s could not drain %s's leftover migration session (backend pid %d): "+
			"it does not start its migration", ev.worker.name, owner, pid))
		return
	}
	if owner == d.seen.killed && d.seen.drained == 0 {
		d.seen.drained = drainTook(outcome)
	}
	d.say("demo", fmt.Sprintf("→ %s drained %s's leftover migration session before starting its own "+
		"(backend pid %d: %s): %s's half-done transaction was rolled back", ev.worker.name, owner, pid, outcome, owner))
}

// drainTook reads the duration in drainOutcome's words ("terminated, gone 312ms after the
// drain began"); 0 if there is none.
func drainTook(outcome string) time.Duration {
	f := strings.Fields(outcome)
	for i := 1; i < len(f); i++ {
		if f[i] == "after" {
			took, _ := time.ParseDuration(f[i-1])
			return took
		}
	}
	return 0
}

// conclude shows what the migrations left in the demo table, and fails the demo unless
// each step was applied exactly once, by one worker.
func (d *demo) conclude(ctx context.Context) error {
	rows, err := readDemoTable(ctx, d.admin)
	if err != nil {
		return err
	}
	list, ok := describeDemoTable(rows)
	d.say("demo", fmt.Sprintf("table %s after the run: %s", demoTable, list))
	if !ok {
		return fmt.Errorf("table %s should hold steps 1 to %d, each once and all by one worker; it holds %s",
			demoTable, demoSteps, list)
	}
	var others []string
	for _, w := range d.workers {
		if w.backend != 0 && w.name != rows[0].worker {
			others = append(others, w.name)
		}
	}
	if len(others) > 0 {
		d.say("demo", fmt.Sprintf("→ each step applied exactly once, all by %s; the half-done migrations of %s left nothing",
			rows[0].worker, strings.Join(others, " and ")))
	}
	d.say("demo", fmt.Sprintf("done: takeover after SIGKILL %s; the killed holder's leftover session drained in %s; "+
		"holder told of a terminated session %s", fmtDur(d.seen.takeover), fmtDur(d.seen.drained), fmtDur(d.seen.told)))
	return nil
}
