package pgtest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// etcdArgs are one etcd's arguments: a single-member cluster, its data in dir, client
// and peer URLs on the given loopback ports.
func etcdArgs(dir string, client, peer int) []string {
	c := "http://127.0.0.1:" + strconv.Itoa(client)
	p := "http://127.0.0.1:" + strconv.Itoa(peer)
	return []string{
		"--name", "e0", "--data-dir", dir,
		"--listen-client-urls", c, "--advertise-client-urls", c,
		"--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
		"--initial-cluster", "e0=" + p, "--initial-cluster-state", "new",
		"--initial-cluster-token", "pgtest-" + strconv.Itoa(client),
	}
}

// patroniConfig is one node's Patroni configuration: etcd v3 on etcdPort, the REST API
// and PostgreSQL on their loopback ports, the data directory in dir, the DCS timings of
// opts (asynchronous replication unless opts.Synchronous), and a pg_hba trusting
// 127.0.0.1 (replication too).
func patroniConfig(n *PatroniNode, etcdPort int, binDir string, opts PatroniOptions) string {
	rest := "127.0.0.1:" + strconv.Itoa(n.RESTPort)
	pg := "127.0.0.1:" + strconv.Itoa(n.PGPort)
	lines := []string{
		"scope: pgtest",
		"name: " + n.Name,
		"log:", "  level: INFO",
		"restapi:", "  listen: " + rest, "  connect_address: " + rest,
		"etcd3:", "  hosts: 127.0.0.1:" + strconv.Itoa(etcdPort), "  protocol: http",
		"bootstrap:",
		"  dcs:",
		"    ttl: " + strconv.Itoa(opts.TTL),
		"    loop_wait: " + strconv.Itoa(opts.LoopWait),
		"    retry_timeout: " + strconv.Itoa(opts.RetryTimeout),
		"    maximum_lag_on_failover: 1073741824",
		"    synchronous_mode: " + strconv.FormatBool(opts.Synchronous),
		"    postgresql:",
		"      use_pg_rewind: false",
		"      use_slots: true",
		"      parameters:",
		"        wal_level: replica",
		"        hot_standby: 'on'",
		"        max_wal_senders: 5",
		"        max_replication_slots: 5",
		"        max_connections: 100",
		"  initdb:", "  - encoding: UTF8", "  - auth: trust",
		"postgresql:",
		"  listen: " + pg, "  connect_address: " + pg,
		"  data_dir: " + n.dataDir(),
		"  bin_dir: " + binDir,
		"  pgpass: " + n.dir + "/pgpass",
		"  authentication:",
		"    superuser:", "      username: postgres", "      password: postgres",
		"    replication:", "      username: replicator", "      password: replicator",
		"  parameters:",
		"    unix_socket_directories: '" + n.dir + "'",
		"    fsync: 'off'",
		"    shared_buffers: 16MB",
		"  pg_hba:",
		"  - local all all trust",
		"  - host replication replicator 127.0.0.1/32 trust",
		"  - host all all 127.0.0.1/32 trust",
		"watchdog:", "  mode: 'off'",
	}
	return strings.Join(lines, "\n") + "\n"
}

// patroniHAProxyConfig is HAProxy in front of the nodes as Patroni's sample haproxy.cfg
// has it: TCP mode, the primary found by an HTTP check of each node's REST API
// (OPTIONS /primary answers 200 on the leader only), with the check timings of the
// brief (inter 1s fall 2 rise 1) and on-marked-down shutdown-sessions only if asked.
func patroniHAProxyConfig(port int, nodes []*PatroniNode, shutdownSessions bool) string {
	down := ""
	if shutdownSessions {
		down = " on-marked-down shutdown-sessions"
	}
	ms := strconv.FormatInt((30*time.Minute).Milliseconds(), 10) + "ms"
	var b strings.Builder
	b.WriteString("global\n    maxconn 200\n\n")
	b.WriteString("defaults\n    mode tcp\n    retries 2\n    timeout connect 4s\n")
	b.WriteString("    timeout client " + ms + "\n    timeout server " + ms + "\n    timeout check 5s\n\n")
	b.WriteString("listen primary\n    bind 127.0.0.1:" + strconv.Itoa(port) + "\n")
	b.WriteString("    option httpchk OPTIONS /primary\n    http-check expect status 200\n")
	b.WriteString("    default-server inter 1s fall 2 rise 1" + down + "\n")
	for _, n := range nodes {
		fmt.Fprintf(&b, "    server %s 127.0.0.1:%d maxconn 100 check port %d\n", n.Name, n.PGPort, n.RESTPort)
	}
	return b.String()
}
