package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// writeConfig writes pgbouncer.ini and userlist.txt into b.dir, owned by the user
// PgBouncer runs as.
func (b *PgBouncer) writeConfig(up *pgconn.Config) error {
	users := fmt.Sprintf("%q %q\n", b.user, up.Password)
	files, err := b.tlsFiles()
	if err != nil {
		return err
	}
	files["pgbouncer.ini"], files["userlist.txt"] = b.ini(up), users
	for name, content := range files {
		path := filepath.Join(b.dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
		if b.cred != nil {
			if err := os.Chown(path, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ini returns pgbouncer.ini: the settings StartPgBouncer documents, then those the
// options set (an option left at its zero value writes nothing: PgBouncer's default).
func (b *PgBouncer) ini(up *pgconn.Config) string {
	set := b.set
	poolSize := PgBouncerPoolSize
	if b.mode == PoolSession {
		poolSize = PgBouncerSessionPoolSize
	}
	if set.poolSize > 0 {
		poolSize = set.poolSize
	}
	serverHost, listen := up.Host, "127.0.0.1"
	if set.net != nil {
		serverHost, listen = set.net.serverIP, "*"
	}
	db := fmt.Sprintf("host=%s port=%d dbname=%s", serverHost, up.Port, b.db)
	if set.connectQuery != "" {
		db += " connect_query='" + strings.ReplaceAll(set.connectQuery, "'", "''") + "'"
	}
	// The fallback entry ("*") passes any other database through to the same server, for
	// tests that make a database of their own.
	ini := fmt.Sprintf(`[databases]
%s = %s
* = host=%s port=%d

[pgbouncer]
listen_addr = %s
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = %s
default_pool_size = %d
reserve_pool_size = 0
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
logfile = %s
client_idle_timeout = %d
`, b.db, db, serverHost, up.Port, listen, b.port, filepath.Join(b.dir, "userlist.txt"), b.user, b.mode,
		poolSize, filepath.Join(b.dir, "pgbouncer.log"), set.clientIdleTimeout)
	return ini + set.tcpLines() + b.tlsLines()
}

// tcpLines are the lines of the settings that PgBouncer leaves to the OS by default.
func (set pgbouncerSettings) tcpLines() string {
	var out string
	if set.idleTransactionTimeout > 0 {
		out += fmt.Sprintf("idle_transaction_timeout = %d\n", set.idleTransactionTimeout)
	}
	if set.keepalive != [3]int{} {
		out += fmt.Sprintf("tcp_keepidle = %d\ntcp_keepintvl = %d\ntcp_keepcnt = %d\n",
			set.keepalive[0], set.keepalive[1], set.keepalive[2])
	}
	if set.userTimeout > 0 {
		out += fmt.Sprintf("tcp_user_timeout = %d\n", set.userTimeout)
	}
	return out
}
