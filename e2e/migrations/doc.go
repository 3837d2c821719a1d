// Package migrations holds end-to-end tests of work fencing (issue 20) with the real
// migration tools: golang-migrate's CLI and library, goose's CLI and psql, run under
// pgadvisory run or Manager.Do, with the lock's holder SIGKILLed in the middle of a slow
// migration. See README.md. The package itself is empty; it is a module of its own so that
// the tools' dependencies stay out of the library's go.mod.
package migrations
