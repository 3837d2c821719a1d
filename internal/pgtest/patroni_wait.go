package pgtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// waitFor polls check until it succeeds, bounded by 90 s, ctx, and the exit of p (nil:
// none watched).
func waitFor(ctx context.Context, what string, p *child, check func(context.Context) error) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		if p != nil && p.exited() {
			return fmt.Errorf("pgtest: waiting for %s: %s exited:\n%s", what, filepath.Base(p.cmd.Path), p.output())
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: no %s after 90s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// httpStatus sends method to url and fails unless the answer has status want.
func httpStatus(ctx context.Context, method, url string, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d", method, url, resp.StatusCode)
	}
	return nil
}

// isLeader reports whether n's Patroni answers its REST check as the primary.
func (n *PatroniNode) isLeader(ctx context.Context) bool {
	return httpStatus(ctx, "GET", "http://127.0.0.1:"+strconv.Itoa(n.RESTPort)+"/primary", 200) == nil
}

// waitLeader blocks until a node other than not (nil: any) is the leader and
// answers a query, and returns it.
func (c *PatroniCluster) waitLeader(ctx context.Context, not *PatroniNode) (*PatroniNode, error) {
	var leader *PatroniNode
	err := waitFor(ctx, "Patroni leader", nil, func(ctx context.Context) error {
		for _, n := range c.Nodes {
			if n.patroni.exited() && n != not {
				return fmt.Errorf("patroni %s exited:\n%s", n.Name, n.patroni.output())
			}
			if n != not && n.isLeader(ctx) {
				leader = n
				return query(ctx, n.DSN(), "SELECT 1")
			}
		}
		return fmt.Errorf("no leader yet")
	})
	return leader, err
}

// Leader returns the node whose Patroni answers as the primary, waiting for one.
func (c *PatroniCluster) Leader(ctx context.Context) (*PatroniNode, error) {
	return c.waitLeader(ctx, nil)
}

// WaitNewLeader blocks until a node other than old is the leader and accepts queries, and
// returns it.
func (c *PatroniCluster) WaitNewLeader(ctx context.Context, old *PatroniNode) (*PatroniNode, error) {
	return c.waitLeader(ctx, old)
}

// waitStreaming blocks until the leader has a replica streaming from it.
func (c *PatroniCluster) waitStreaming(ctx context.Context) error {
	leader, err := c.waitLeader(ctx, nil)
	if err != nil {
		return err
	}
	return waitFor(ctx, "a streaming replica", nil, func(ctx context.Context) error {
		for _, n := range c.Nodes {
			if n.patroni.exited() {
				return fmt.Errorf("patroni %s exited:\n%s", n.Name, n.patroni.output())
			}
		}
		// pg_basebackup's WAL stream counts as streaming too: the replica's own
		// walreceiver has its member name as application_name.
		for _, n := range c.Nodes {
			if n == leader {
				continue
			}
			err := query(ctx, leader.DSN(), "SELECT 1/count(*)::int FROM pg_stat_replication "+
				"WHERE state = 'streaming' AND application_name = '"+n.Name+"'")
			if err != nil {
				return fmt.Errorf("%s not streaming: %w", n.Name, err)
			}
		}
		return nil
	})
}

// query runs sql on a new connection to dsn.
func query(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// startHAProxy runs HAProxy in front of the nodes and waits until a query through it
// succeeds.
func (c *PatroniCluster) startHAProxy(ctx context.Context, bin string, shutdownSessions bool) error {
	port, err := pglocal.FreePort()
	if err != nil {
		return err
	}
	cfg := filepath.Join(c.dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(patroniHAProxyConfig(port, c.Nodes, shutdownSessions)), 0o644); err != nil {
		return err
	}
	if c.haproxy, err = startChild(bin, filepath.Join(c.dir, "haproxy.log"), nil, nil, "-f", cfg, "-db"); err != nil {
		return err
	}
	c.dsn = fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", port)
	leader, err := c.waitLeader(ctx, nil)
	if err != nil {
		return err
	}
	// HAProxy starts with every server up: a client may reach a standby until the first
	// checks mark it down, which HAProxy logs.
	return waitFor(ctx, "HAProxy routing to the leader only", c.haproxy, func(ctx context.Context) error {
		log := c.haproxy.output()
		for _, n := range c.Nodes {
			if n != leader && !strings.Contains(log, "primary/"+n.Name+" is DOWN") {
				return fmt.Errorf("HAProxy has not marked %s down yet", n.Name)
			}
		}
		return query(ctx, c.dsn+" connect_timeout=2", "SELECT 1/(NOT pg_is_in_recovery())::int")
	})
}

// Freeze stops (SIGSTOP) n's PostgreSQL: its postmaster and every child of it, found
// through postmaster.pid and /proc. The kernel still accepts connections to it; nothing
// answers. Close continues them. It returns the pids stopped.
func (c *PatroniCluster) Freeze(n *PatroniNode) ([]int, error) {
	pid, err := postmasterPID(n.dataDir())
	if err != nil {
		return nil, err
	}
	pids := []int{pid}
	syscall.Kill(pid, syscall.SIGSTOP) // no new children from here on
	pids = append(pids, pglocal.ChildrenOf(pid)...)
	c.mu.Lock()
	c.frozen = append(c.frozen, pids...)
	c.mu.Unlock()
	for _, p := range pids[1:] {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil && err != syscall.ESRCH {
			return pids, fmt.Errorf("pgtest: SIGSTOP %d: %w", p, err)
		}
	}
	return pids, nil
}

// KillPatroni kills n's Patroni (SIGKILL, the process alone): its PostgreSQL stays as
// it is, and its leader key, if it held it, expires after the ttl.
func (c *PatroniCluster) KillPatroni(n *PatroniNode) error {
	err := n.patroni.cmd.Process.Signal(syscall.SIGKILL)
	<-n.patroni.exit
	return err
}

// Logs returns the tail of every process's log (for failure messages).
func (c *PatroniCluster) Logs() string {
	var b strings.Builder
	for _, p := range []*child{c.etcd, c.haproxy} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(p.log), p.output())
		}
	}
	fmt.Fprintf(&b, "--- etcd %s, haproxy %s\n", c.etcdURL, c.dsn)
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "--- %s patroni (postgres on %d, REST on %d)\n%s\n", n.Name, n.PGPort, n.RESTPort, n.patroni.output())
	}
	return b.String()
}

// PIDs returns the pids of the cluster's processes: etcd, HAProxy, each Patroni and each
// running postmaster.
func (c *PatroniCluster) PIDs() []int {
	var pids []int
	for _, p := range []*child{c.etcd, c.haproxy} {
		if p != nil {
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	for _, n := range c.Nodes {
		pids = append(pids, n.patroni.cmd.Process.Pid)
		if pid, err := postmasterPID(n.dataDir()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
