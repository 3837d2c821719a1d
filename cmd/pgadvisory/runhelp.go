package main

// exitCodesHelp is the one table of exit codes; README.md and docs/migrations.md repeat it.
const exitCodesHelp = `Exit codes:
  0        success (run: CMD exited 0)
  N        run: CMD's own exit code N
  64       usage error (bad flag, argument or lock name)
  69       server unavailable: cannot connect (a server that is not up yet is retried
           for --connect-timeout), a server error, a statement-pooling proxy
  70       internal error
  75       lock not acquired: --no-wait found it held, or --wait elapsed (the code
           --conflict-exit-code sets; 75 by default); or an earlier holder's session
           was still running 10s after run terminated it (always 75); CMD was not
           started
  76       lock lost while CMD ran; CMD was stopped (SIGTERM, SIGKILL after --grace)
  77       run may not terminate an earlier holder's session (the message says which
           privilege to grant); CMD was not started, the lock was released
  126      CMD cannot be executed
  127      CMD not found
  128+N    CMD was killed by signal N (e.g. 137 for SIGKILL)
  130, 143 pgadvisory itself got SIGINT or SIGTERM (128+N for signal N, e.g. 129 for
           SIGHUP) while connecting, waiting for the lock or draining; CMD was not
           started
`

// runHelp is the help of run.
const runHelp = `Usage: pgadvisory run (--name NAME | --key KEY) [--wait DURATION | --no-wait] [flags] -- CMD [ARGS...]
       pgadvisory run --slots N --name NAME [--wait DURATION | --no-wait] [flags] -- CMD [ARGS...]

Takes the advisory lock NAME (or the lock with the 64-bit key KEY), runs CMD while
holding it, releases it when CMD exits and exits with CMD's exit code. While it waits it
reports who holds the lock (backend pid, application_name, client, for how long) when the
holder changes and every 10 s.
SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to CMD's process group; while
pgadvisory is still connecting or waiting they end the wait at once, and CMD never starts.
A signal that was ignored when pgadvisory started (nohup) stays ignored, for CMD too.
If the lock is lost while CMD runs, CMD's process group gets SIGTERM, then SIGKILL after
--grace, and pgadvisory exits 76.

With --slots N, run takes one of N slots of the semaphore NAME (the library's
Manager.Semaphore(NAME, N); slot i is the lock "NAME#slot/i") instead of the lock NAME:
at most N commands run at once, across machines. The slot is held as run holds a lock:
everything below (descriptor 3, loss, draining, exit codes) holds for the slot, and
PGADVISORY_KEY is the slot's key. While it waits run reports that the semaphore is full
and who holds its slots. Every run of NAME must give the same N.

CMD never outlives the lock. Like flock(1), run hands CMD the lock itself: the socket of
the lock's connection, as file descriptor 3 (PGADVISORY_LOCK_FD=3 in its environment).
The server keeps the lock until every process holding that socket has exited. If
pgadvisory dies (SIGKILL, OOM kill), the kernel kills CMD (PR_SET_PDEATHSIG), and the lock
stays held until CMD and every process it started that kept descriptor 3 (a background
job, a script's child) are gone; only then can anyone else take it. CMD must never read
or write descriptor 3. A daemon started by CMD should close it (3>&-), or it keeps the
lock held after a pgadvisory crash for as long as it runs. A command that closes it loses
the protection: the lock then ends with pgadvisory, and CMD, killed a moment later, may
still run when the next holder starts. When CMD exits, run releases the lock, whatever
CMD left running.

Behind a transaction pooler (PgBouncer pool_mode=transaction, Supabase's port 6543,
Neon's -pooler endpoints, RDS Proxy) run holds the lock as one open transaction on its
connection to the pooler, which keeps that transaction's server session for it until the
transaction ends: descriptor 3 is that connection, and all of the above holds. Once
pgadvisory is gone its heartbeat stops: a pooler's idle_transaction_timeout shorter than
the life of a process that kept descriptor 3 would end the holding under it.

Fencing: a CMD that stalls can outlive its lock for a moment (until it is stopped). With
--token, run takes a fencing token once the lock is held (a number greater than every
token an earlier holder of NAME took; one row per lock in the fencing table, created once
with pgadvisory init-fencing) and hands it to CMD, which can make its writes to this
database conditional on it, in the same transaction:
  SELECT token FROM $PGADVISORY_FENCE_TABLE WHERE key = $PGADVISORY_KEY AND NOT pair
    FOR SHARE
and roll back unless it returns $PGADVISORY_TOKEN (a newer holder took a newer token).
Other stores can refuse a write whose token is smaller than one they have seen.

CMD's own sessions: the lock is one session, but CMD does its work on sessions of its
own, and PostgreSQL notices a dead client only when it next reads from or writes to the
socket: the migration of a killed holder could go on and commit after the next holder
started. So run tags CMD's sessions and drains them. CMD gets PGAPPNAME (the holding's
tag, then the PGAPPNAME pgadvisory was given) and PGOPTIONS (client_connection_check_interval
on PostgreSQL 14+ and the server-side keepalive, then the PGOPTIONS given; left out behind
a pooler such as PgBouncer), which libpq and pgx read. Once it holds the lock (and the
token), run looks for sessions tagged for an earlier holder of NAME, on any database of
the server, waits up to --drain-wait for them to end on their own, terminates those left
(pg_terminate_backend) and waits until they are gone (their transactions rolled back);
it says on stderr which it found and how each ended. Only then does CMD start. If one
cannot be terminated (77: the role lacks the privilege) or is not gone 10s after (75),
CMD is not started and the lock is released. A tool whose connection string sets
application_name ignores PGAPPNAME: put $PGADVISORY_APPNAME there.

Environment of CMD:
  PGADVISORY_LOCK_FD      3, the lock's connection (see above)
  PGAPPNAME               the holding's tag, then the PGAPPNAME pgadvisory was given
  PGOPTIONS               settings for CMD's sessions, then the PGOPTIONS given
  PGADVISORY_APPNAME      the holding's tag alone, for a connection string's
                          application_name
  PGADVISORY_KEY          the lock's 64-bit key (what pgadvisory hash NAME prints)
  PGADVISORY_TOKEN        with --token: the fencing token
  PGADVISORY_FENCE_TABLE  with --token: the fencing table, quoted for SQL

Flags (exactly one of --name and --key):
` + lockFlagsHelp + `  --wait DURATION     give up (exit 75) after waiting this long, e.g. 30s, 10m;
                      0 (the default) waits as long as it takes
  --no-wait           exit 75 at once if the lock is held
  --conflict-exit-code N
                      exit N instead of 75 when --no-wait finds the lock held or --wait
                      elapses (flock's -E): 1 to 125, except 64, 69, 70, 76 and 77;
                      pick one CMD never exits with, to tell the two apart
  --shared            shared mode: shared holders run together; an exclusive one runs alone
  --slots N           take one of N slots (1 to 128) of the semaphore NAME instead of
                      the lock: at most N commands at once. Needs --name (a semaphore
                      is named); not with --shared (a slot is held exclusively) nor
                      --token (holders of different slots run at once by design, so
                      per-slot tokens would fence nothing); --namespace works
  --quiet             do not report who holds the lock while waiting, nor an earlier
                      holder's sessions that ended on their own (terminated ones are
                      always reported)
  --drain-wait DURATION
                      how long to wait for an earlier holder's sessions to end on their
                      own before terminating them (default 1s; 0 terminates at once;
                      at most 1h)
  --grace DURATION    if the lock is lost: time between SIGTERM and SIGKILL to CMD
                      (default 10s)
  --holder-name NAME  application_name other sessions see
                      (default "pgadvisory HOST/PID"; HOST is the pod name in Kubernetes)
  --token             take a fencing token and export it as PGADVISORY_TOKEN (not with
                      --shared); if the fencing table does not exist, exit 69 and say
                      how to create it; CMD is not started
  --fence-table [SCHEMA.]TABLE
                      the fencing table of --token (default advisory_fence, found
                      through the search_path)
  --dsn DSN           connection string (default $DATABASE_URL, else the PG* variables)
` + connectTimeoutHead + "30s" + connectTimeoutTail + `
` + connectionHelp + `
` + exitCodesHelp
