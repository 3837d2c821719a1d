//go:build !linux

package advisory

import (
	"errors"
	"net"
)

// poller is Linux-only (epoll). Elsewhere every held session is watched by its own
// blocking reader goroutine (session.readUntilLoss): the same loss detection, at the cost
// of a goroutine start and wake-up per lock.
type poller struct{}

func newPoller() (*poller, error) { return nil, nil }

func (p *poller) add(*pin) error { return errors.New("no poller on this platform") }
func (p *poller) addHangup(*pin, int) error {
	return errors.New("no poller on this platform")
}
func (p *poller) remove(*pin) {}
func (p *poller) stop()       {}

func socketFD(net.Conn) int { return -1 }

func dupSocket(net.Conn) (int, error) {
	return -1, errors.New("not supported on this platform")
}

func pendingInput(net.Conn, int) bool { return false }

func shutdownSocket(int) {}

func closeFD(int) {}

func socketError(int) error { return nil }

// unixDirect is Linux-only (SO_PEERCRED and /proc): elsewhere a Unix socket keeps the
// ownership checks.
func unixDirect(net.Conn, uint32) bool { return false }
