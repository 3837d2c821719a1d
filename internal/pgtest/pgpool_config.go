package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// PgpoolWriteFunctions is write_function_list in the [PgpoolFunctionList] configuration:
// the sequence functions, as Pgpool-II's docs show the setting.
const PgpoolWriteFunctions = "nextval,setval"

// writeConfig writes pgpool.conf, an empty pcp.conf and a trusting pool_hba.conf into
// p.dir, owned by cred's user. The settings, chosen on purpose:
//
//   - streaming_replication mode, backend 0 the primary, backend 1 the standby, weight 1
//     each, load_balance_mode = on; Pgpool-II finds which one is the primary at start-up
//     (sr_check_user: the DSN's user; no periodic check, no health check, no failover:
//     the tests control the servers);
//   - conf's function lists and allow_sql_comments (see [PgpoolConfig]), every other
//     load-balancing setting at its default (disable_load_balance_on_write =
//     'transaction', statement_level_load_balance = off: a session's reads go to the
//     backend chosen when it connected);
//   - num_init_children = 32 (the default: at most 32 clients at once), max_pool = 1;
//   - no pool_hba, no pool_passwd: the servers' trust authentication decides;
//   - then the caller's extra lines.
func (p *Pgpool) writeConfig(up, sb *pgconn.Config, conf PgpoolConfig, extra []string, cred *syscall.Credential) error {
	lines := []string{
		"backend_clustering_mode = 'streaming_replication'",
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", p.port),
		fmt.Sprintf("socket_dir = '%s'", p.dir),
		"pcp_listen_addresses = '127.0.0.1'",
		fmt.Sprintf("pcp_port = %d", p.pcp),
		fmt.Sprintf("pcp_socket_dir = '%s'", p.dir),
		fmt.Sprintf("wd_ipc_socket_dir = '%s'", p.dir),
		fmt.Sprintf("pid_file_name = '%s'", filepath.Join(p.dir, "pgpool.pid")),
		fmt.Sprintf("logdir = '%s'", p.dir),
		"log_destination = 'stderr'",
		"log_min_messages = warning",
		"enable_pool_hba = off",
		"pool_passwd = ''",
		"num_init_children = 32",
		"max_pool = 1",
		"load_balance_mode = on",
		"sr_check_period = 0",
		fmt.Sprintf("sr_check_user = '%s'", up.User),
		fmt.Sprintf("sr_check_password = '%s'", up.Password),
		fmt.Sprintf("sr_check_database = '%s'", up.Database),
		"health_check_period = 0",
		"failover_on_backend_error = off",
		"use_watchdog = off",
		"memory_cache_enabled = off",
	}
	for i, b := range []*pgconn.Config{up, sb} {
		lines = append(lines,
			fmt.Sprintf("backend_hostname%d = '%s'", i, b.Host),
			fmt.Sprintf("backend_port%d = %d", i, b.Port),
			fmt.Sprintf("backend_weight%d = 1", i),
			fmt.Sprintf("backend_flag%d = 'DISALLOW_TO_FAILOVER'", i))
	}
	if conf == PgpoolFunctionList {
		lines = append(lines, "write_function_list = '"+PgpoolWriteFunctions+"'", "allow_sql_comments = on")
	}
	lines = append(lines, extra...)
	files := map[string]string{
		"pgpool.conf":   strings.Join(lines, "\n") + "\n",
		"pcp.conf":      "",
		"pool_hba.conf": "local all all trust\nhost all all 127.0.0.1/32 trust\n",
	}
	for name, text := range files {
		path := filepath.Join(p.dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return err
		}
		if cred != nil {
			if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
	}
	return nil
}
