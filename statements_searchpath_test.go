package advisory_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/advisorytest"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// shadowSQL installs shadow.make(words, operators): for every pg_catalog function,
// aggregate, relation and base type named by one of words, and every pg_catalog operator
// named by one of operators, an object of the same name (and argument types) in schema
// shadow that fails when it is used: a function or operator that raises, a view whose
// rows raise, a domain whose check raises. A role whose search_path is "shadow,
// pg_catalog" then reaches a shadow for every unqualified name, as a role would reach an
// attacker's schema (CVE-2018-1058). Objects that cannot be mirrored (arguments of type
// internal, say) are skipped; make returns how many it created.
const shadowSQL = `
CREATE SCHEMA shadow;
CREATE FUNCTION shadow.boom() RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'a shadow in schema shadow was used'; END$$;
CREATE FUNCTION shadow.agg(bigint, anyelement) RETURNS bigint LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'a shadow aggregate in schema shadow was used'; END$$;
CREATE FUNCTION shadow.make(words text[], operators text[]) RETURNS integer LANGUAGE plpgsql AS $f$
DECLARE
  r record;
  n integer := 0;
  raise text := 'BEGIN RAISE EXCEPTION ''a shadow in schema shadow was used''; END';
BEGIN
  FOR r IN SELECT p.proname, p.prokind, pg_get_function_identity_arguments(p.oid) AS args,
                  pg_get_function_result(p.oid) AS res
           FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY (words) LOOP
    BEGIN
      IF r.prokind = 'a' THEN
        EXECUTE format('CREATE AGGREGATE shadow.%I(anyelement) (sfunc = shadow.agg, stype = bigint)', r.proname);
      ELSE
        EXECUTE format('CREATE FUNCTION shadow.%I(%s) RETURNS %s LANGUAGE plpgsql AS %L',
                       r.proname, r.args, r.res, replace(raise, 'a shadow in', 'shadow function ' || r.proname || ' in'));
      END IF;
      n := n + 1;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
  END LOOP;
  FOR r IN SELECT o.oid, o.oprname, o.oprleft::regtype AS l, o.oprright::regtype AS rt, o.oprresult::regtype AS res
           FROM pg_operator o
           WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprleft <> 0 AND o.oprname = ANY (operators) LOOP
    BEGIN
      EXECUTE format('CREATE FUNCTION shadow.op_%s(%s, %s) RETURNS %s LANGUAGE plpgsql AS %L',
                     r.oid, r.l, r.rt, r.res,
                     replace(raise, 'a shadow in', format('shadow operator %s(%s, %s) in', r.oprname, r.l, r.rt)));
      EXECUTE format('CREATE OPERATOR shadow.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = shadow.op_%s)',
                     r.oprname, r.l, r.rt, r.oid);
      n := n + 1;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
  END LOOP;
  FOR r IN SELECT c.relname FROM pg_class c
           WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind IN ('r', 'v') AND c.relname = ANY (words) LOOP
    BEGIN
      EXECUTE format('CREATE VIEW shadow.%I AS SELECT * FROM pg_catalog.%I WHERE shadow.boom()', r.relname, r.relname);
    EXCEPTION WHEN OTHERS THEN -- a column of a pseudo-type (pg_attribute's): a view with none
      EXECUTE format('CREATE VIEW shadow.%I AS SELECT FROM pg_catalog.%I WHERE shadow.boom()', r.relname, r.relname);
    END;
    n := n + 1;
  END LOOP;
  FOR r IN SELECT t.typname FROM pg_type t
           WHERE t.typnamespace = 'pg_catalog'::regnamespace AND t.typtype = 'b' AND t.typname = ANY (words) LOOP
    BEGIN
      EXECUTE format('CREATE DOMAIN shadow.%I AS pg_catalog.%I CHECK (shadow.boom())', r.typname, r.typname);
      n := n + 1;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
  END LOOP;
  RETURN n;
END
$f$`

// shadowOperators are the operators shadowed: every one the library's SQL could use.
var shadowOperators = []string{"=", "<>", "<", ">", "<=", ">=", "||", "&", "|", "<<", ">>", "+", "-", "*", "/", "~~"}

// sourceWords returns every lower-case identifier in the library's Go sources (the root
// package and advisorytest, tests excluded): a superset of the server names its SQL uses,
// so a name added to a statement later is shadowed too.
func sourceWords(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	more, err := filepath.Glob("advisorytest/*.go")
	require.NoError(t, err)
	word := regexp.MustCompile(`[a-z_][a-z0-9_]*`)
	seen := map[string]bool{}
	for _, f := range append(files, more...) {
		if filepath.Ext(f) != ".go" || len(f) > 8 && f[len(f)-8:] == "_test.go" {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, w := range word.FindAll(b, -1) {
			seen[string(w)] = true
		}
	}
	words := make([]string, 0, len(seen))
	for w := range seen {
		words = append(words, w)
	}
	slices.Sort(words)
	return words
}

// TestServerFunctionsCannotBeShadowed: a role whose search_path puts a schema ahead of
// pg_catalog in which every server function, aggregate, operator, relation and type name
// the library's sources use has a shadow that fails when used. Every library call still
// works, and its locks are real (pg_locks, refused to another session): each server name
// in its SQL is qualified, so none reaches the shadows. The same calls written
// unqualified do reach them (checked first, so the test cannot pass by shadowing nothing).
func TestServerFunctionsCannotBeShadowed(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db := advisorytest.DSN(t)
	owner, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	t.Cleanup(func() { owner.Close(context.Background()) })
	_, err = owner.Exec(ctx, shadowSQL)
	require.NoError(t, err)
	var made int
	require.NoError(t, owner.QueryRow(ctx, "SELECT shadow.make($1, $2)", sourceWords(t), shadowOperators).Scan(&made))
	t.Logf("%d shadows made", made)

	shadowed := pgtest.WithPairs(db, "search_path=shadow,pg_catalog,public")
	victim, err := pgx.Connect(ctx, shadowed)
	require.NoError(t, err)
	t.Cleanup(func() { victim.Close(context.Background()) })
	for _, sql := range []string{
		"SELECT pg_try_advisory_lock(1)", "SELECT pg_advisory_unlock_all()", "SELECT pg_backend_pid()",
		"SELECT count(pg_backend_pid())", "SELECT 1 = 1", "SELECT 'a'::text", "SELECT FROM pg_locks",
		"SELECT current_setting('advisory.owner', true)", "SELECT 1::bigint >> 3",
	} {
		_, err := victim.Exec(ctx, sql)
		require.Error(t, err, "%s reaches no shadow: the test would prove nothing", sql)
	}

	m, err := advisory.New(ctx, shadowed, advisory.WithDrainWait(10*time.Millisecond), advisory.WithLeaderTable())
	require.NoError(t, err, "New: setup, probe and the engine self-test")
	t.Cleanup(m.Close)
	other, err := advisory.New(ctx, shadowed, advisory.WithLeaderTable())
	require.NoError(t, err)
	t.Cleanup(other.Close)
	shadowWorkload(t, ctx, m, other, owner, shadowed)
	shadowLeaders(t, ctx, m, other)
}

// shadowLeaders runs the leader statements: the table's creation, Publish with and without
// a value (through LeadAs), the release's announcement, and the observer's reads.
func shadowLeaders(t *testing.T, ctx context.Context, m, other *advisory.Manager) {
	require.NoError(t, m.CreateLeaderTable(ctx))
	require.NoError(t, m.CreateLeaderTable(ctx))
	obs, err := other.Observe(ctx, "leader")
	require.NoError(t, err)
	seen := func(cond func(advisory.Leader) bool) advisory.Leader {
		for ld := range obs {
			require.NoError(t, ld.Err)
			if cond(ld) {
				return ld
			}
		}
		t.Fatal("the observation ended")
		return advisory.Leader{}
	}
	require.NoError(t, m.LeadAs(ctx, "leader", "v1", func(ctx context.Context) error {
		ld := seen(func(l advisory.Leader) bool { return l.Value == "v1" })
		if ld.Holder.PID != advisory.LockFromContext(ctx).PID() {
			return errors.New("the observer saw another leader")
		}
		return advisory.LockFromContext(ctx).Publish(ctx, "")
	}))
	seen(func(l advisory.Leader) bool { return !l.Elected })
	l, err := m.Lock(ctx, "leader")
	require.NoError(t, err)
	require.NoError(t, l.Publish(ctx, "v2"))
	ld, err := other.Leader(ctx, "leader")
	require.NoError(t, err)
	assert.Equal(t, "v2", ld.Value)
	require.NoError(t, l.Unlock(ctx))
}

// shadowWorkload runs every statement the library has through m (and other, a second
// process), and checks with owner (the default search_path) that the locks were real.
func shadowWorkload(t *testing.T, ctx context.Context, m, other *advisory.Manager, owner *pgx.Conn, shadowed string) {
	held := func(key advisory.Key, pair bool) []uint32 {
		sub := 1
		if pair {
			sub = 2
		}
		rows, err := owner.Query(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = $1 AND objid = $2 AND objsubid = $3
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
			uint32(uint64(key)>>32), uint32(key), sub)
		require.NoError(t, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
		require.NoError(t, err)
		return pids
	}

	l, err := m.Lock(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []uint32{l.PID()}, held(l.Key(), false))
	_, err = other.TryLock(ctx, "a")
	var locked *advisory.LockedError
	require.ErrorAs(t, err, &locked, "refused to another process")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = other.Lock(short, "a") // cancelled wait: the reconcile statement
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	hs, err := other.Holders(ctx, "a")
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, l.PID(), hs[0].PID)
	_, err = m.AllHolders(ctx)
	require.NoError(t, err)

	require.NoError(t, m.CreateFenceTable(ctx))
	require.NoError(t, m.CreateFenceTable(ctx)) // the second finds the table current
	tok, err := l.Token(ctx)
	require.NoError(t, err)
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		if err := m.CheckToken(ctx, tx, "a", tok); err != nil {
			return err
		}
		return advisory.XactLock(ctx, tx, "x")
	}))
	work := l.WorkAppName("shadow")
	cfg, err := pgx.ParseConfig(shadowed)
	require.NoError(t, err)
	l.WorkConfig(&cfg.Config)
	tagged, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { tagged.Close(context.Background()) })
	require.NoError(t, l.Unlock(ctx))
	require.Empty(t, held(l.Key(), false))

	// The next holder drains the earlier holder's leftover work (list and terminate).
	require.NoError(t, other.Do(ctx, "a", func(ctx context.Context) error { return nil }))
	require.Eventually(t, func() bool { return tagged.Ping(ctx) != nil }, 10*time.Second, 10*time.Millisecond,
		"the leftover session %s was terminated", work)
	require.NoError(t, other.DoTx(ctx, "a", func(ctx context.Context, tx pgx.Tx) error {
		return advisory.TryXactLockShared(ctx, tx, "x")
	}))

	for _, take := range []func() (*advisory.Lock, error){
		func() (*advisory.Lock, error) { return m.LockShared(ctx, "b") },
		func() (*advisory.Lock, error) { return m.LockPair(ctx, advisory.Pair{7, 9}) },
		func() (*advisory.Lock, error) { return m.TryLockKey(ctx, 42) },
	} {
		l, err := take()
		require.NoError(t, err)
		p, pair := l.Pair()
		require.Equal(t, []uint32{l.PID()}, held(l.Key(), pair))
		if pair {
			tok, err := l.Token(ctx)
			require.NoError(t, err)
			require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { return m.CheckTokenPair(ctx, tx, p, tok) }))
		}
		require.NoError(t, l.Unlock(ctx))
	}

	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.LockAll(ctx, []string{"s1", "s2"}))
	require.NoError(t, other.Do(ctx, "s3", func(ctx context.Context) error {
		err := s.TryLockAll(ctx, []string{"s3", "s4"})
		if !errors.As(err, &locked) {
			return errors.New("TryLockAll of a held name did not fail with LockedError")
		}
		return nil
	}))
	require.Equal(t, []uint32{s.PID()}, held(advisory.KeyOf("s2"), false))
	require.NoError(t, s.Unlock(ctx, "s1"))
	require.NoError(t, s.Close(ctx))
	require.Empty(t, held(advisory.KeyOf("s2"), false))

	sem, err := m.Semaphore("sem", 1)
	require.NoError(t, err)
	slot, err := sem.Acquire(ctx)
	require.NoError(t, err)
	waiter, err := other.Semaphore("sem", 1)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the waiter listen: the release notifies it
	require.NoError(t, slot.Unlock(ctx))
	require.NoError(t, <-got)
}
