package migrations_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// Values the probe passes through the libpq environment variables.
const (
	probeAppName  = "e2e-probe"
	probeOptions  = "-c client_connection_check_interval=1000"
	probeInterval = "1s" // client_connection_check_interval as current_setting shows 1000 ms
)

// probeTool is one way of running the probe migration: cmd runs it against the database at
// url (a postgres:// URL).
type probeTool struct {
	name string
	cmd  func(tl *tools, url string) *exec.Cmd
}

func probeTools() []probeTool {
	return []probeTool{
		{"psql (libpq)", func(tl *tools, url string) *exec.Cmd {
			return exec.Command(tl.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", "testdata/probe/migrate/1_probe.up.sql")
		}},
		{"migrate postgres:// (lib/pq)", func(tl *tools, url string) *exec.Cmd {
			return exec.Command(tl.migrate, "-path", "testdata/probe/migrate", "-database", url, "up")
		}},
		{"migrate pgx5:// (pgx v5)", func(tl *tools, url string) *exec.Cmd {
			return exec.Command(tl.migrate, "-path", "testdata/probe/migrate", "-database", pgx5URL(url), "up")
		}},
		{"goose postgres (pgx v5 stdlib)", func(tl *tools, url string) *exec.Cmd {
			return exec.Command(tl.goose, "-dir", "testdata/probe/goose", "postgres", url, "up")
		}},
	}
}

// pgx5URL turns a postgres:// URL into the pgx5:// one golang-migrate's pgx v5 driver takes.
func pgx5URL(url string) string { return "pgx5://" + strings.TrimPrefix(url, "postgres://") }

// probeResult is what one tool's sessions were given.
type probeResult struct {
	sessions []string // application_name of every session the tool opened, as pg_stat_activity showed it
	app      string   // current_setting('application_name') inside the migration
	interval string   // current_setting('client_connection_check_interval') inside the migration
}

// TestToolsTakeLibpqEnvironment records which tools give their sessions the
// application_name in PGAPPNAME and the settings in PGOPTIONS, the two variables
// pgadvisory run tags its command's work with: each tool runs a migration that records
// what its session got, and pg_stat_activity is read while it runs. When the connection
// string names its own application_name and options, they win over the environment in
// every tool (libpq's precedence), which is why run also exports PGADVISORY_APPNAME.
func TestToolsTakeLibpqEnvironment(t *testing.T) {
	tl := needTools(t)
	var table []string
	for i, tool := range probeTools() {
		t.Run(tool.name, func(t *testing.T) {
			if tool.name == "psql (libpq)" && tl.psql == "" {
				requireOutsideCI(t, "no psql on this machine")
			}
			url := freshDB(t, fmt.Sprintf("e2e_probe_%d", i))
			got := runProbe(t, tl, tool, url)
			table = append(table, fmt.Sprintf("%-32s env only: application_name %q, interval %q", tool.name, got.app, got.interval))
			assert.Equal(t, probeAppName, got.app, "PGAPPNAME honoured")
			assert.Equal(t, probeInterval, got.interval, "PGOPTIONS honoured")
			assert.NotEmpty(t, got.sessions)
			for _, app := range got.sessions {
				assert.Equal(t, probeAppName, app, "every session of the tool shows PGAPPNAME in pg_stat_activity")
			}

			own := freshDB(t, fmt.Sprintf("e2e_probe_%d_dsn", i))
			got = runProbe(t, tl, tool, own+"&application_name=dsn-app&options=--search_path%3Dpublic")
			table = append(table, fmt.Sprintf("%-32s DSN sets both: application_name %q, interval %q", tool.name, got.app, got.interval))
			assert.Equal(t, "dsn-app", got.app, "the DSN's application_name wins over PGAPPNAME")
			assert.Equal(t, "0", got.interval, "the DSN's options win over PGOPTIONS")
		})
	}
	sort.Strings(table)
	t.Logf("what each tool's sessions got (PGAPPNAME=%s PGOPTIONS=%q):\n%s", probeAppName, probeOptions, strings.Join(table, "\n"))
}

// runProbe runs the probe migration with tool against url with PGAPPNAME and PGOPTIONS
// set, and returns what its sessions got.
func runProbe(t *testing.T, tl *tools, tool probeTool, url string) probeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := dbName(t, url)
	watch := watchSessions(t, ctx, db)
	cmd := tool.cmd(tl, url)
	cmd.Env = append(os.Environ(), "PGAPPNAME="+probeAppName, "PGOPTIONS="+probeOptions)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", tool.name, out)
	var res probeResult
	res.sessions = watch()
	conn := connect(t, ctx, url)
	require.NoError(t, conn.QueryRow(ctx, "SELECT app, check_interval FROM probe").Scan(&res.app, &res.interval))
	return res
}

// watchSessions samples pg_stat_activity for the client sessions of database db until the
// returned function is called, which returns the application_name of each session seen.
func watchSessions(t *testing.T, ctx context.Context, db string) func() []string {
	t.Helper()
	conn := adminConn(t, ctx)
	seen := map[uint32]string{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			rows, _ := conn.Query(ctx, `SELECT pid, application_name FROM pg_stat_activity
				WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, db)
			var pid uint32
			var app string
			pgx.ForEachRow(rows, []any{&pid, &app}, func() error { seen[pid] = app; return nil })
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() []string {
		close(stop)
		wg.Wait()
		apps := make([]string, 0, len(seen))
		for _, app := range seen {
			apps = append(apps, app)
		}
		return apps
	}
}

// dbName is the database of a postgres:// URL.
func dbName(t testing.TB, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	return strings.TrimPrefix(parsed.Path, "/")
}

// requireOutsideCI skips t with reason, or fails it under CI=true.
func requireOutsideCI(t *testing.T, reason string) {
	t.Helper()
	if pgtest.InCI() {
		t.Fatalf("%s (CI=true)", reason)
	}
	t.Skip(reason)
}

// TestDSNApplicationNameTakesTheTag: a tool whose connection string names its own
// application_name ignores PGAPPNAME, so under pgadvisory run its sessions would go
// untagged (and undrained); the remedy is to start that application_name with
// $PGADVISORY_APPNAME, the holding's tag alone. Both, with golang-migrate's CLI.
func TestDSNApplicationNameTakesTheTag(t *testing.T) {
	tl := needTools(t)
	for _, c := range []struct {
		name, db, appParam, want string
	}{
		{"DSN's own name", "e2e_probe_own", "myapp", `^myapp$`},
		{"DSN's name after $PGADVISORY_APPNAME", "e2e_probe_tagged", "${PGADVISORY_APPNAME}%20myapp", `^pgadv/[0-9a-z]+/[0-9a-z]+/[0-9a-z]+\.[0-9a-z]{6} myapp$`},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := freshDB(t, c.db)
			script := `exec migrate -path testdata/probe/migrate -database "$DATABASE_URL&application_name=` + c.appParam + `" up`
			cmd := exec.Command(tl.pgadvisory, "run", "--name", t.Name(), "--", "sh", "-c", script)
			cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "PATH="+toolDir+string(filepath.ListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var app, interval string
			require.NoError(t, connect(t, ctx, url).QueryRow(ctx, "SELECT app, check_interval FROM probe").Scan(&app, &interval))
			assert.Regexp(t, c.want, app)
			assert.Equal(t, probeInterval, interval, "PGOPTIONS still applies: the DSN has no options")
		})
	}
}
