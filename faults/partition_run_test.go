package faults_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// runExitLost is pgadvisory run's exit code when the lock was lost while its command ran.
const runExitLost = 76

// runWorkSQL is A's command's work, run by psql: it reports its session on stderr, then
// runs one transaction in one Query message (psql's \; joins statements), as a migration
// tool sends a migration file, so the server runs it to its COMMIT without the client: it
// inserts the marker (the session's application_name, which PGAPPNAME made the holding's
// tag) and sleeps past the server's release bound.
const runWorkSQL = `\set ON_ERROR_STOP on
SELECT pg_backend_pid() AS pid, split_part(current_setting('application_name'), ' ', 1) AS tag,
    current_setting('client_connection_check_interval') AS cci,
    concat_ws('/', current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'),
      current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout')) AS ka \gset
\warn LOCKED :pid :tag :cci :ka
BEGIN \; INSERT INTO ` + workMarkers + ` (holder) VALUES (current_setting('application_name')) \; SELECT pg_sleep(%d) \; COMMIT;
`

// runClientKeepalive is A's client keepalive, in libpq's keys in its connection string:
// told within 3 s; the server side keeps the defaults (freed after 20 s to 30 s).
const runClientKeepalive = "keepalives_idle=1 keepalives_interval=1 keepalives_count=2"

// TestPartitionedRunsCommandIsGoneBeforeTheNextHolderStarts is the partition round with
// holder A as `pgadvisory run -- psql -f work.sql` in the namespace: run gives psql the
// holding's tag (PGAPPNAME) and settings (PGOPTIONS). The cut comes while psql's
// transaction sleeps; run is told and stops psql, whose backend runs on; B (as in
// TestPartitionedHoldersWorkIsGoneBeforeTheNextHolderStarts) must find it gone before its
// own work starts, and A's transaction must never commit. One cut, 4 pairs (the same Bs,
// the control included): with the server's default keepalive a cut takes about 30 s to
// free the locks.
func TestPartitionedRunsCommandIsGoneBeforeTheNextHolderStarts(t *testing.T) {
	ctx := needPartitionLab(t)
	cli := buildCLI(t)
	bounds := newManager(t, runClientKeepalive).Bounds()
	script := filepath.Join(t.TempDir(), "work.sql")
	require.NoError(t, os.WriteFile(script, fmt.Appendf(nil, runWorkSQL, int(runWorkSleep.Seconds())), 0o644))
	start := func(t *testing.T, name string) partitionedHolder { return startPartitionedRun(t, cli, script, name) }
	pairs := pairsOfEachKind(t, start)
	for i, res := range workPartitionRound(t, ctx, 0, pairs) {
		logWorkRound(t, 0, pairs[i].b, res)
		assertPartitionBounds(t, partitionResult{profile: "run", told: res.told, freed: res.freed, bounds: bounds})
	}
}

// runWorkSleep is how long A's psql transaction sleeps: past the default server bound.
const runWorkSleep = 60 * time.Second

// startPartitionedRun starts A, pgadvisory run with psql as its command, in the namespace
// and returns once psql's transaction has inserted its marker and sleeps.
func startPartitionedRun(t *testing.T, cli, script, name string) partitionedHolder {
	t.Helper()
	dsn := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable %s",
		netLab.serverIP, srv.Port(), runClientKeepalive)
	// psql's server as its environment names it is run's own (DATABASE_URL, which would
	// name it first, emptied): run gives it PGOPTIONS (see advisory's Lock.WorkEnv).
	env := []string{"DATABASE_URL=", "PGHOST=" + netLab.serverIP, "PGPORT=" + strconv.Itoa(srv.Port()),
		"PGUSER=postgres", "PGDATABASE=postgres", "PGSSLMODE=disable"}
	h := startMerged(t, env, "ip", "netns", "exec", netLab.ns, cli, "run", "--name", name, "--dsn", dsn, "--",
		"psql", "-X", "-q", "-f", script)
	f := strings.Fields(h.expect(t, "LOCKED", 30*time.Second).text)
	require.Len(t, f, 5, "LOCKED <work pid> <tag> <check interval> <keepalive>")
	workPID, _ := strconv.ParseUint(f[1], 10, 32)
	a := partitionedHolder{h: h, workPID: uint32(workPID), tag: f[2], cli: true,
		settings: "client_connection_check_interval=" + f[3] + ", keepalive " + f[4]}
	require.True(t, strings.HasPrefix(a.tag, "pgadv/"), "psql's session carries the holding's tag: %q", a.tag)
	require.NotEqual(t, "0", f[3], "PGOPTIONS reached psql's session: client_connection_check_interval is set")
	a.lockPID = holderOf(t, advisory.KeyOf(name))
	require.NotZero(t, a.lockPID, "run holds the lock")
	waitWorkSleeps(t, a.workPID)
	return a
}

// startMerged starts argv with env added, its stdout and stderr merged into the helper's
// lines; it is killed (its process group) when the test ends.
func startMerged(t *testing.T, env []string, argv ...string) *helper {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	require.NoError(t, err)
	h := &helper{cmd: cmd, lines: make(chan line, 1024), exit: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			h.lines <- line{sc.Text(), time.Now()}
		}
		r.Close()
		close(h.lines)
		cmd.Wait()
		close(h.exit)
	}()
	t.Cleanup(h.kill)
	return h
}

// expectContaining waits for a line that contains text and returns it; other lines are
// logged (pgadvisory's and psql's messages say what went wrong if it never comes).
func (h *helper) expectContaining(t *testing.T, text string, timeout time.Duration) line {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				t.Fatalf("pgadvisory run exited before printing %q", text)
			}
			if strings.Contains(l.text, text) {
				return l
			}
			t.Logf("run: %s", l.text)
		case <-deadline:
			t.Fatalf("pgadvisory run did not print %q within %v", text, timeout)
		}
	}
}

// buildCLI builds pgadvisory into the test's temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pgadvisory")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/pgadvisory").CombinedOutput()
	require.NoError(t, err, "go build ./cmd/pgadvisory: %s", out)
	return bin
}
