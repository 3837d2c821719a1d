package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// M is the part of *testing.M a Suite runs.
type M interface{ Run() int }

// A Suite is a test package's TestMain around a server:
//
//	func TestMain(m *testing.M) {
//		os.Exit(pgtest.Suite{Srv: &srv, Err: &startErr, Setup: setup}.Run(m))
//	}
//
// Run starts the server and sets *Srv, or sets *Err to why there is none: then database
// tests skip (pgtest.Need), or, under CI=true, the run fails at once; examples, which
// cannot skip, are not run. With a server, *Admin is a pool on it, and Setup runs before
// the tests and its cleanup after them, before the server stops.
type Suite struct {
	Srv **Server
	Err *error
	// Admin, if not nil, is set to a plain pool on the server (for pg_locks and
	// pg_terminate_backend), opened before Setup and closed after the tests.
	Admin **pgxpool.Pool
	// Start starts the server; nil: [Start].
	Start func(context.Context) (*Server, error)
	// Setup prepares the package's shared state (an admin pool, DATABASE_URL); nil: none.
	// An error fails the run.
	Setup func(ctx context.Context, srv *Server) (cleanup func(), err error)
	// Parallel, if above zero, is the package's -test.parallel when the command line sets
	// none. Go's default is GOMAXPROCS, which suits CPU-bound tests; a package whose tests
	// mostly wait on servers (round trips, lock waits, timers) finishes sooner with more of
	// them running at once. An explicit -parallel (or -test.parallel) always wins.
	Parallel int
	// ShortParallel, if above zero, is the package's -test.parallel under -short instead
	// of Parallel. Go starts the parallel tests last paused first, so a package's long
	// tests that mostly wait on timers (heartbeats, reapers) can get a slot
	// only at the end of its parallel phase and run on alone; with more slots they start
	// early and wait beside the rest. The inner loop is bound by wall time; the full run
	// (CI's, with -race) keeps Parallel.
	ShortParallel int
}

// Run runs m as the Suite says and returns the exit code for os.Exit.
func (s Suite) Run(m M) int {
	ctx := context.Background()
	flag.Parse()
	if n := s.parallel(); n > 0 && !flagGiven("test.parallel") {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
	start := s.Start
	if start == nil {
		start = Start
	}
	*s.Srv, *s.Err = start(ctx)
	if *s.Err != nil {
		if InCI() {
			fmt.Fprintf(os.Stderr, "FAIL: CI=true and no PostgreSQL for the tests: %v\n", *s.Err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "no PostgreSQL: database tests skip, examples are not run: %v\n", *s.Err)
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
			flag.Set("test.skip", "^Example")
		}
		return m.Run()
	}
	defer (*s.Srv).Close()
	if s.Admin != nil {
		admin, err := pgxpool.New(ctx, (*s.Srv).DSN())
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: admin pool: %v\n", err)
			return 1
		}
		defer admin.Close()
		*s.Admin = admin
	}
	if s.Setup != nil {
		cleanup, err := s.Setup(ctx, *s.Srv)
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: test set-up: %v\n", err)
			return 1
		}
		if cleanup != nil {
			defer cleanup()
		}
	}
	return m.Run()
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// SettleReaders sends one round trip on every idle connection of pool. pgx starts a
// background reader goroutine on a connection whose write stalls for 15 ms (a loaded
// machine), and after its statement that goroutine stays blocked in a read until the
// connection's next message: on a pool that stays open, such as a suite's admin pool, it
// would count as a goroutine leaked by the test that used the pool. A test calls this
// before it counts goroutines; a reader left on a connection of the code under test is
// not reached and still counts.
func SettleReaders(ctx context.Context, pool *pgxpool.Pool) {
	for _, c := range pool.AcquireAllIdle(ctx) {
		c.Ping(ctx)
		c.Release()
	}
}

// parallel is the -test.parallel the Suite asks for: ShortParallel under -short if set,
// else Parallel.
func (s Suite) parallel() int {
	if f := flag.Lookup("test.short"); f != nil && f.Value.String() == "true" && s.ShortParallel > 0 {
		return s.ShortParallel
	}
	return s.Parallel
}
