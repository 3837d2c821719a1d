package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// CanPartition returns nil when this process can make network namespaces and drop
// packets in them (it is root, and ip and nft are installed), else an error wrapping
// [ErrUnavailable] that says what is missing.
func CanPartition() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: a real partition needs root (network namespaces, nftables)", ErrUnavailable)
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: a real partition needs %s (Debian packages iproute2, nftables): %v",
				ErrUnavailable, tool, err)
		}
	}
	return nil
}

// RunTool runs a network tool (ip, nft) and blocks until it exits. Its error carries the
// command line and what the tool printed.
func RunTool(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ClearStaleNets deletes the network namespaces and host links named prefix+pid, for
// one of prefixes, whose test process pid is gone: what a run killed before its cleanup
// left behind. They would otherwise keep their addresses and routes, and a later run
// could collide with them. Deleting a namespace deletes the links and nftables tables in
// it; only links on the host need deleting by name.
func ClearStaleNets(prefixes ...string) {
	spaces, _ := exec.Command("ip", "netns", "list").Output()
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, name := range staleNames(string(spaces), prefixes) {
		RunTool("ip", "netns", "del", name)
	}
	for _, name := range staleNames(string(links), prefixes) {
		RunTool("ip", "link", "del", name)
	}
}

// staleNames returns the words of listing (ip's output: "advp12 (id: 0)", "7: advh12@if6:")
// that are prefix+pid with pid not a live process other than this one.
func staleNames(listing string, prefixes []string) []string {
	var out []string
	for _, f := range strings.Fields(listing) {
		f = strings.TrimSuffix(strings.SplitN(f, "@", 2)[0], ":")
		for _, prefix := range prefixes {
			pid, err := strconv.Atoi(strings.TrimPrefix(f, prefix))
			if strings.HasPrefix(f, prefix) && err == nil && pid != os.Getpid() && !processAlive(pid) {
				out = append(out, f)
			}
		}
	}
	return out
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// FreeSubnet returns an N in 1..250 such that 10.231.N.0/30 is used by no address or route
// on the host, trying first the one derived from seed (a pid), so that concurrent runs
// spread out.
func FreeSubnet(seed int) (int, error) {
	addrs, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("ip -4 addr show: %w", err)
	}
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return 0, fmt.Errorf("ip -4 route show: %w", err)
	}
	used := string(addrs) + string(routes)
	for i := 0; i < 250; i++ {
		n := (seed+i)%250 + 1
		if !strings.Contains(used, fmt.Sprintf("10.231.%d.", n)) {
			return n, nil
		}
	}
	return 0, errors.New("pgtest: no free 10.231.N.0/30 subnet on this host")
}

// startInNetns starts cmd in the network namespace ns (made by ip netns add), tied to
// this process as [pglocal.StartTied] ties it: the child inherits the namespace of the
// thread that forks it. Going through ip netns exec instead would lose the parent-death
// signal, which the kernel clears when the child changes its user.
func startInNetns(cmd *exec.Cmd, sig syscall.Signal, ns string) error {
	var startErr error
	err := inNetns(ns, func() { startErr = pglocal.StartTied(cmd, sig) })
	if err != nil && startErr == nil && cmd.Process != nil {
		// The thread could not leave ns and ends with this goroutine, which fires the
		// child's parent-death signal: stop it now.
		cmd.Process.Kill()
		cmd.Wait()
	}
	if err != nil {
		return err
	}
	return startErr
}

// inNetns runs fn on a locked thread moved into the network namespace ns for the call:
// what fn forks, and the sockets it opens, belong to ns (a socket stays in the namespace
// it was made in). The thread moves back before it is unlocked; if it cannot, it stays
// locked and ends with the calling goroutine rather than serve others in ns.
func inNetns(ns string, fn func()) error {
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err == nil {
		defer home.Close()
		err = setns(target)
	}
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("pgtest: enter network namespace %s: %w", ns, err)
	}
	fn()
	if err := setns(home); err != nil {
		return fmt.Errorf("pgtest: leave network namespace %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return nil
}

func setns(f *os.File) error {
	nr := sysSetns
	if nr < 0 {
		return syscall.ENOSYS
	}
	if _, _, errno := syscall.RawSyscall(uintptr(nr), f.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
		return errno
	}
	return nil
}
