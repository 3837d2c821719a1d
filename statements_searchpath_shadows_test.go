package advisory_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The shadow schema of TestServerFunctionsCannotBeShadowed (statements_searchpath_test.go).

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
