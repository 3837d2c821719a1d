#!/bin/sh
# migrate-up.sh DIR: `migrate up` for the migrations in DIR against $DATABASE_URL, as the
# command of `pgadvisory run`, recovering first from a migration an earlier holder left
# half done. This is the recipe docs/migrations.md gives; the e2e tests run it as it is.
#
# golang-migrate marks version N dirty before it runs migration N and clean after; a holder
# killed in between leaves "Dirty database version N" and every later `up` refuses to run.
# Under pgadvisory run, recovering is safe: the lock is held, so no other holder runs, and
# run has drained the earlier holders' sessions before starting this script, so the
# interrupted migration's transaction is over and nothing changes under us any more.
# golang-migrate's postgres and pgx5 drivers send a migration file as one query, which
# PostgreSQL runs as one transaction: migration N was applied entirely or not at all, and
# "not at all" unless the kill fell between its commit and the version update. So force
# the version before N and run N again. Should N in fact have been applied, `up` fails
# ("already exists"), changes nothing and leaves N dirty: then a person checks and runs
# `migrate force N`.
set -eu
dir=$1
state=$(migrate -path "$dir" -database "$DATABASE_URL" version 2>&1) || true
case $state in
*' (dirty)')
	v=${state%% *}
	# The version before v among the migration files (-1: none, golang-migrate's "no version").
	prev=$(ls "$dir" | sed -n 's/^\([0-9][0-9]*\)_.*\.up\.sql$/\1/p' | sort -n |
		awk -v v="$v" '$1 < v + 0 { p = $1 } END { print (p == "" ? -1 : p) }')
	echo "migrate-up.sh: migration $v was interrupted (dirty): forcing version $prev and running it again" >&2
	migrate -path "$dir" -database "$DATABASE_URL" force -- "$prev"
	;;
esac
# exec: migrate takes this shell's place, so the parent-death signal run set (and the
# lock's descriptor) stay with the process that does the work.
exec migrate -path "$dir" -database "$DATABASE_URL" up
