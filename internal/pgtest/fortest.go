package pgtest

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"
)

// T is the part of testing.TB the ForTest helpers use.
type T interface {
	TB
	Cleanup(func())
}

// PgBouncerForTest starts PgBouncer in front of srv in mode for one test and stops it when
// the test ends. Without pgbouncer installed the test is skipped with the reason, except
// under CI=true, where that fails it (.ci/run installs pgbouncer). Any other error fails
// the test.
func PgBouncerForTest(t T, srv *Server, mode PoolMode, opts ...PgBouncerOption) *PgBouncer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := StartPgBouncer(ctx, srv, mode, opts...)
	if errors.Is(err, ErrUnavailable) && !InCI() {
		t.Skipf("no PgBouncer for this test: %v", err)
	}
	if err != nil {
		t.Fatalf("PgBouncer (pool_mode=%s): %v", mode, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// StandbyForTest starts a hot standby of primary for one test and stops it when the test
// ends. Without the tools for it (pg_basebackup of the primary's major version) the test
// is skipped with the reason; under CI=true that is a failure unless the binaries come from
// EnvPGBin (a version run: the npm-packaged server binaries have no pg_basebackup). Any
// other error fails the test.
func StandbyForTest(t T, primary *Server) *Standby {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartStandby(ctx, primary)
	if errors.Is(err, ErrUnavailable) && (!InCI() || strings.TrimSpace(os.Getenv(EnvPGBin)) != "") {
		t.Skipf("no hot standby for this test: %v", err)
	}
	if err != nil {
		t.Fatalf("hot standby: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// SyncPairForTest starts a primary with a synchronous standby ([StartSyncPair]) for one
// test and stops both when the test ends. Without the tools for a standby the test is
// skipped or fails, as with [StandbyForTest]; any other error fails the test.
func SyncPairForTest(t T) *SyncPair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := StartSyncPair(ctx)
	if errors.Is(err, ErrUnavailable) && (!InCI() || strings.TrimSpace(os.Getenv(EnvPGBin)) != "") {
		t.Skipf("no synchronous standby for this test: %v", err)
	}
	if err != nil {
		t.Fatalf("primary with a synchronous standby: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// PgpoolForTest starts a hot standby of primary and a Pgpool-II in front of both
// ([StartPgpool], conf, extra) for one test, and stops them when the test ends. Without pgpool
// or the tools for a standby the test is skipped with the reason, except under CI=true,
// where that fails it (.ci/run installs pgpool2) unless the binaries come from EnvPGBin
// (see [StandbyForTest]). Any other error fails the test.
func PgpoolForTest(t T, primary *Server, conf PgpoolConfig, extra ...string) (*Pgpool, *Standby) {
	t.Helper()
	if _, err := pgpoolBinary(); err != nil {
		if !InCI() {
			t.Skipf("no Pgpool-II for this test: %v", err)
		}
		t.Fatalf("Pgpool-II under CI=true: %v", err)
	}
	sb := StandbyForTest(t, primary)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := StartPgpool(ctx, primary, sb, conf, extra...)
	if err != nil {
		t.Fatalf("Pgpool-II (%s): %v", conf, err)
	}
	t.Cleanup(func() { p.Close() })
	return p, sb
}
