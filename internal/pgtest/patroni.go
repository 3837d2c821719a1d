package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// PatroniOptions are the settings of a started Patroni cluster that tests vary. Zero
// values take the defaults named on each field.
type PatroniOptions struct {
	// TTL is the leader key's time to live in seconds (Patroni's ttl; default 10): the
	// replica takes over at most this long after the leader's Patroni stops renewing it.
	TTL int
	// LoopWait is Patroni's loop_wait in seconds (default 1).
	LoopWait int
	// RetryTimeout is Patroni's retry_timeout in seconds (default 5).
	RetryTimeout int
	// Synchronous sets synchronous_mode: true; the default is Patroni's, asynchronous.
	Synchronous bool
	// ShutdownSessions adds on-marked-down shutdown-sessions to HAProxy's servers (not
	// in Patroni's sample configuration).
	ShutdownSessions bool
}

// PatroniCluster is a running Patroni cluster on loopback: one etcd (v3 API), two
// Patroni nodes each managing a PostgreSQL (run as the postgres OS user when we are
// root), and HAProxy routing to the leader by Patroni's REST check, as Patroni's sample
// haproxy.cfg does. Close tears it all down.
type PatroniCluster struct {
	dir     string
	etcd    *child
	etcdURL string
	Nodes   []*PatroniNode
	haproxy *child
	dsn     string // through HAProxy

	mu     sync.Mutex
	frozen []int // pids stopped by Freeze, continued by Close

	closeOnce sync.Once
}

// PatroniNode is one member of a PatroniCluster.
type PatroniNode struct {
	Name     string
	PGPort   int
	RESTPort int
	dir      string
	patroni  *child
}

func (n *PatroniNode) dataDir() string { return filepath.Join(n.dir, "data") }

// DSN is the superuser's connection string straight to the node's PostgreSQL.
func (n *PatroniNode) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=5", n.PGPort)
}

// DSN is a client's connection string through HAProxy (to the leader).
func (c *PatroniCluster) DSN() string { return c.dsn }

// patroniTools finds patroni, etcd and haproxy, or returns an error wrapping ErrUnavailable.
func patroniTools() (patroni, etcd, haproxy string, err error) {
	find := func(name, pkg string) string {
		p, ferr := debianBinary(name, pkg)
		if err == nil {
			err = ferr
		}
		return p
	}
	return find("patroni", "patroni"), find("etcd", "etcd-server"), find("haproxy", "haproxy"), err
}

// StartPatroni starts a Patroni cluster as [PatroniCluster] describes, on free loopback
// ports, and blocks until a leader exists, the replica streams from it, and a query
// through HAProxy succeeds, or ctx ends. It returns an error wrapping [ErrUnavailable]
// when patroni, etcd, haproxy or the PostgreSQL binaries are missing. On error nothing
// is left running.
func StartPatroni(ctx context.Context, opts PatroniOptions) (*PatroniCluster, error) {
	patroni, etcd, haproxy, err := patroniTools()
	if err != nil {
		return nil, err
	}
	binDir, err := pglocal.FindBinaries()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if opts.TTL == 0 {
		opts.TTL = 10
	}
	if opts.LoopWait == 0 {
		opts.LoopWait = 1
	}
	if opts.RetryTimeout == 0 {
		opts.RetryTimeout = 5
	}
	c := &PatroniCluster{}
	if err := c.start(ctx, patroni, etcd, haproxy, binDir, opts); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *PatroniCluster) start(ctx context.Context, patroni, etcd, haproxy, binDir string, opts PatroniOptions) error {
	dir, err := os.MkdirTemp("", "patroni")
	if err != nil {
		return err
	}
	c.dir = dir
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user enters its node's dir
		return err
	}
	if err := c.startEtcd(ctx, etcd); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		if err := c.startNode(patroni, binDir, "node"+strconv.Itoa(i), opts); err != nil {
			return err
		}
		if i == 0 { // the first bootstraps; the second then clones it
			if _, err := c.waitLeader(ctx, nil); err != nil {
				return err
			}
		}
	}
	if err := c.waitStreaming(ctx); err != nil {
		return err
	}
	return c.startHAProxy(ctx, haproxy, opts.ShutdownSessions)
}

// startEtcd runs one etcd and waits until it reports healthy.
func (c *PatroniCluster) startEtcd(ctx context.Context, bin string) error {
	client, err := pglocal.FreePort()
	if err != nil {
		return err
	}
	peer, err := pglocal.FreePort()
	if err != nil {
		return err
	}
	var env []string
	if runtime.GOARCH != "amd64" {
		env = append(env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	c.etcd, err = startChild(bin, filepath.Join(c.dir, "etcd.log"), nil, env,
		etcdArgs(filepath.Join(c.dir, "etcd"), client, peer)...)
	if err != nil {
		return err
	}
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
	return waitFor(ctx, "etcd healthy", c.etcd, func(ctx context.Context) error {
		return httpStatus(ctx, "GET", c.etcdURL+"/health", 200)
	})
}

// startNode writes a node's configuration and runs its Patroni as the postgres user.
func (c *PatroniCluster) startNode(bin, binDir, name string, opts PatroniOptions) error {
	n := &PatroniNode{Name: name, dir: filepath.Join(c.dir, name)}
	if err := os.Mkdir(n.dir, 0o700); err != nil {
		return err
	}
	cred, err := pglocal.OwnDir(n.dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if n.PGPort, err = pglocal.FreePort(); err != nil {
		return err
	}
	if n.RESTPort, err = pglocal.FreePort(); err != nil {
		return err
	}
	cfg := filepath.Join(n.dir, "patroni.yml")
	if err := os.WriteFile(cfg, []byte(patroniConfig(n, c.etcdPort(), binDir, opts)), 0o644); err != nil {
		return err
	}
	n.patroni, err = startChild(bin, filepath.Join(n.dir, "patroni.log"), cred,
		[]string{"HOME=" + n.dir, "LC_ALL=C.UTF-8", "LANG=C.UTF-8"}, cfg)
	if err != nil {
		return err
	}
	c.Nodes = append(c.Nodes, n)
	return nil
}

func (c *PatroniCluster) etcdPort() int {
	p, _ := strconv.Atoi(c.etcdURL[len("http://127.0.0.1:"):])
	return p
}

// Close tears the cluster down: it continues what Freeze stopped, stops HAProxy, each
// Patroni (SIGTERM, which stops its PostgreSQL; SIGKILL after 15 s), any PostgreSQL left
// (immediate shutdown, then SIGKILL), and etcd, and removes the files. It blocks until
// every process has exited. Later calls do nothing.
func (c *PatroniCluster) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		for _, pid := range c.frozen {
			syscall.Kill(pid, syscall.SIGCONT)
		}
		c.mu.Unlock()
		c.haproxy.stop(5 * time.Second)
		for _, n := range c.Nodes {
			n.patroni.stop(15 * time.Second)
			stopPostgres(n.dataDir())
		}
		c.etcd.stop(5 * time.Second)
		if c.dir != "" {
			os.RemoveAll(c.dir)
		}
	})
}

// stopPostgres stops a PostgreSQL its Patroni left running (a killed Patroni does):
// SIGQUIT to the postmaster, then SIGKILL to it and its children after 10 s.
func stopPostgres(dataDir string) {
	pid, err := postmasterPID(dataDir)
	if err != nil || !alive(pid) {
		return
	}
	kids := pglocal.ChildrenOf(pid)
	for _, p := range append([]int{pid}, kids...) {
		syscall.Kill(p, syscall.SIGCONT)
	}
	syscall.Kill(pid, syscall.SIGQUIT)
	for deadline := time.Now().Add(10 * time.Second); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // the postmaster is not our child: poll its exit
	}
	for _, p := range append([]int{pid}, kids...) {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// PatroniForTest starts a Patroni cluster for one test and tears it down when the test
// ends. Without patroni, etcd or haproxy installed the test is skipped with the reason,
// except under CI=true, where that fails it (.ci/run installs them). Any other error
// fails the test.
func PatroniForTest(t T, opts PatroniOptions) *PatroniCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartPatroni(ctx, opts)
	if errors.Is(err, ErrUnavailable) && !InCI() {
		t.Skipf("no Patroni cluster for this test: %v", err)
	}
	if err != nil {
		t.Fatalf("Patroni cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
