package main

// exitCodesHelp is the one table of exit codes; README.md and docs/migrations.md repeat it.
const exitCodesHelp = `Exit codes:
  0        success (run: CMD exited 0); N: CMD's own exit code N
  64       usage error (bad flag, argument or lock name)
  69       cannot connect (retried for --connect-timeout), server error, statement pooler
  70       internal error
  75       not acquired (--no-wait, --wait; --conflict-exit-code), or an earlier
           holder's session still running 10s after run terminated it; CMD not started
  76       lock lost while CMD ran; CMD stopped (SIGTERM, SIGKILL after --grace)
  77       may not terminate an earlier holder's session; CMD not started
  126      CMD cannot be executed
  127      CMD not found
  128+N    CMD killed by signal N (137: SIGKILL)
  130, 143 pgadvisory got SIGINT or SIGTERM (128+N for signal N) before CMD started
`

// runHelp is the help of run: what fits a screen, the flags and the exit codes first.
// The long form is docs/run.md.
const runHelp = `Usage: pgadvisory run (--name NAME | --key KEY) [flags] -- CMD [ARGS...]

Runs CMD while holding the advisory lock (like flock(1), across machines) and exits with
CMD's exit code. Flags (exactly one of --name and --key):
  --name NAME            the lock's name (--name=NAME if it starts with '-')
  --key KEY              the lock's 64-bit key, as status and hash print it
  --namespace NS         the lock "NS:NAME", as the library's WithNamespace
  --wait DURATION        give up (exit 75) after this long; 0 (default) waits forever
  --no-wait              exit 75 at once if the lock is held
  --conflict-exit-code N exit N instead of 75 when not acquired (flock -E)
  --shared               shared mode: shared holders run together, exclusive alone
  --slots N              one of N slots of the semaphore NAME: at most N CMDs at once
  --token                export a fencing token as PGADVISORY_TOKEN (init-fencing)
  --fence-table TABLE    the fencing table of --token (default advisory_fence)
  --drain-wait DURATION  let an earlier holder's sessions end before terminating them
                         (default 1s)
  --work-role ROLE       also drain sessions of ROLE, which the work runs as (repeatable)
  --grace DURATION       if the lock is lost: SIGTERM, SIGKILL after this (default 10s)
  --at-least DURATION    hold the lock this long from its taking, after CMD exits too
  --holder-name NAME     application_name others see (default "pgadvisory HOST/PID")
  --heartbeat DURATION   speak on the lock's connection this often, waiting too, for
                         an idle reaper in the path (HAProxy's timeout client) and to
                         see a frozen server behind a proxy (default 2s behind a
                         proxy, else 0: off)
  --quiet                report neither the lock taken nor who holds it while waiting
  --dsn DSN              connection string (default $DATABASE_URL, else PG* variables)
  --connect-timeout DURATION
                         retry a server not up yet, or a lost wait (default 30s; 0: once)

` + exitCodesHelp + `
Signals are forwarded to CMD's process group; before CMD starts they end the wait. CMD
gets the lock's connection as descriptor 3 (never touch it), PGADVISORY_KEY, PGAPPNAME,
PGOPTIONS and PGADVISORY_APPNAME (its sessions tagged, drained by the next holder).
The long form (descriptor 3, loss, --slots, --token, draining, CMD's environment):
docs/run.md in the advisory repository.
`
