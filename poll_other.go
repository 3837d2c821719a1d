//go:build !linux

package advisory

import "errors"

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
