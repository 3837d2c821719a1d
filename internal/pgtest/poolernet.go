package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// PoolerNet is a small network for a pooler under test, whose two links can be cut
// apart with real packet drops (nftables: no FIN, no RST, no ICMP, as when a cable or a
// route goes):
//
//	client namespace ──client link── pooler namespace ──server link── host
//	(a holder process)               (PgBouncer)                      (PostgreSQL, the test)
//
// Why this shape: each link is a veth pair of its own, so a cut of one cannot touch the
// other. The pooler has a namespace of its own (not the host) so that both of its sides
// are reachable only through those links: a cut of the server link drops the pooler's
// packets to and from the server's port and nothing else, so the test process on the
// host still reaches PgBouncer (its console, a second client) over the same veth while
// the pooler cannot reach the server. A cut of the client link drops everything in the
// client namespace, where only the processes the test put there live. PostgreSQL stays
// on the host, listening on [PoolerNet.ServerAddr], so the test reads pg_locks directly
// whatever is cut. The nftables tables live in the namespaces and go with them.
//
// The client link uses 10.232.0.0/30 inside the two namespaces only (it never meets the
// host's routes); the server link a 10.231.N.0/30 that the host does not use
// ([FreeSubnet]). Its names carry the process's pid: one PoolerNet per process at a
// time. A PoolerNet is not safe for concurrent use.
type PoolerNet struct {
	clientNS, poolerNS, hostIf string
	serverIP, poolerUpIP       string // the server link: host end, pooler end
	cidr                       string
	cut                        map[string]bool // namespaces with a cut table
}

// The client link's addresses: the pooler's end and the client's end.
const (
	poolerClientIP = "10.232.0.1"
	clientIP       = "10.232.0.2"
)

// cutTable is the nftables table of a cut, in the namespace it cuts.
const cutTable = "advcut"

// NewPoolerNet makes the namespaces and links, after clearing what killed runs left. It
// fails with an error wrapping [ErrUnavailable] when this process cannot partition
// ([CanPartition]). On error nothing is left behind. Close removes it all.
func NewPoolerNet() (*PoolerNet, error) {
	if err := CanPartition(); err != nil {
		return nil, err
	}
	// The namespaces (advb: pooler, advk: client) and the host's link (advs) are named for
	// the test process's pid.
	ClearStaleNets("advb", "advk", "advs")
	pid := os.Getpid()
	subnet, err := FreeSubnet(pid + 125) // away from another lab's first choice
	if err != nil {
		return nil, err
	}
	id := strconv.Itoa(pid)
	n := &PoolerNet{clientNS: "advk" + id, poolerNS: "advb" + id, hostIf: "advs" + id,
		serverIP: fmt.Sprintf("10.231.%d.1", subnet), poolerUpIP: fmt.Sprintf("10.231.%d.2", subnet),
		cidr: fmt.Sprintf("10.231.%d.0/30", subnet), cut: map[string]bool{}}
	for _, step := range n.steps(id) {
		if err := RunTool(step...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *PoolerNet) steps(id string) [][]string {
	up, cl := "advu"+id, "advl"+id // the pooler's ends of the server and client links
	inPooler := []string{"ip", "-n", n.poolerNS}
	inClient := []string{"ip", "-n", n.clientNS}
	return [][]string{
		{"ip", "netns", "add", n.poolerNS},
		{"ip", "netns", "add", n.clientNS},
		{"ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", up, "netns", n.poolerNS},
		{"ip", "link", "add", cl, "netns", n.poolerNS, "type", "veth", "peer", "name", "advm" + id, "netns", n.clientNS},
		{"ip", "addr", "add", n.serverIP + "/30", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
		append(inPooler, "addr", "add", n.poolerUpIP+"/30", "dev", up),
		append(inPooler, "addr", "add", poolerClientIP+"/30", "dev", cl),
		append(inPooler, "link", "set", up, "up"),
		append(inPooler, "link", "set", cl, "up"),
		append(inPooler, "link", "set", "lo", "up"),
		append(inClient, "addr", "add", clientIP+"/30", "dev", "advm"+id),
		append(inClient, "link", "set", "advm"+id, "up"),
		append(inClient, "link", "set", "lo", "up"),
	}
}

// ServerAddr is the host's address on the server link: PostgreSQL must listen on it
// ([Options.ListenAddresses]) for the pooler to reach it.
func (n *PoolerNet) ServerAddr() string { return n.serverIP }

// ServerCIDR is the server link's network, which PostgreSQL must trust
// ([Options.TrustCIDRs]): the pooler connects from it.
func (n *PoolerNet) ServerCIDR() string { return n.cidr }

// ClientIP is the client's address, as PgBouncer's SHOW CLIENTS shows it.
func (n *PoolerNet) ClientIP() string { return clientIP }

// InClient returns the command prefix that runs a program in the client namespace
// (ip netns exec NS): append the program and its arguments.
func (n *PoolerNet) InClient() []string { return []string{"ip", "netns", "exec", n.clientNS} }

// ClientDSN returns the connection string of a client in the client namespace of b, a
// PgBouncer started with [WithPoolerNet](n).
func (n *PoolerNet) ClientDSN(b *PgBouncer) string {
	return WithParams(b.DSN(), map[string]string{"host": poolerClientIP})
}

// CutClientLink drops every packet in and out of the client namespace, both ways. It
// blocks until the rules are in place (all at once: one nftables transaction).
func (n *PoolerNet) CutClientLink() error {
	return n.addCut(n.clientNS, "drop", "", "")
}

// CutServerLink drops every packet between the pooler and the server's TCP port
// serverPort, both ways, in the pooler namespace; the pooler's own clients, on either
// link, still reach it. It blocks until the rules are in place (all at once: one
// nftables transaction).
func (n *PoolerNet) CutServerLink(serverPort int) error {
	return n.addCut(n.poolerNS, "accept",
		fmt.Sprintf("ip saddr %s tcp sport %d drop", n.serverIP, serverPort),
		fmt.Sprintf("ip daddr %s tcp dport %d drop", n.serverIP, serverPort))
}

// addCut adds, in ns, the cut table: input and output chains with policy, and inRule and
// outRule (if not empty) in them.
func (n *PoolerNet) addCut(ns, policy, inRule, outRule string) error {
	script := fmt.Sprintf("table inet %[1]s {\n"+
		"  chain in {\n    type filter hook input priority 0 ; policy %[2]s ;\n    %[3]s\n  }\n"+
		"  chain out {\n    type filter hook output priority 0 ; policy %[2]s ;\n    %[4]s\n  }\n}\n",
		cutTable, policy, inRule, outRule)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: nft in %s: %w: %s\n%s", ns, err, out, script)
	}
	n.cut[ns] = true
	return nil
}

// Heal removes every cut, blocking until packets flow again. It returns the first error.
func (n *PoolerNet) Heal() error {
	var first error
	for ns := range n.cut {
		if err := RunTool("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", cutTable); err != nil && first == nil {
			first = err
		}
		delete(n.cut, ns)
	}
	return first
}

// Close deletes the namespaces (with their links and rules) and the host's link.
func (n *PoolerNet) Close() {
	RunTool("ip", "netns", "del", n.clientNS)
	RunTool("ip", "netns", "del", n.poolerNS)
	RunTool("ip", "link", "del", n.hostIf)
}

// DialClient dials from the client namespace: a [pgconn.Config] DialFunc for a client
// in this process that must stand behind the client link (its socket is made in that
// namespace, so a cut of the link cuts it). It blocks until the connection is made or
// ctx ends.
func (n *PoolerNet) DialClient(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	var dialErr error
	err := inNetns(n.clientNS, func() { conn, dialErr = (&net.Dialer{}).DialContext(ctx, network, addr) })
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	return conn, dialErr
}
