//go:build !linux

package sockwatch

import "errors"

// Watcher is Linux-only (epoll). Elsewhere [New] returns nil, and the caller watches each
// connection with a blocking reader goroutine of its own: the same news, at the cost of a
// goroutine start and wake-up per registration.
type Watcher struct{}

// New returns nil and no error: there is no Watcher on this platform.
func New() (*Watcher, error) { return nil, nil }

// Add fails: there is no Watcher on this platform.
func (w *Watcher) Add(int, Handler) (Registration, error) {
	return Registration{}, errors.New("no socket watcher on this platform")
}

// AddHangup fails: there is no Watcher on this platform.
func (w *Watcher) AddHangup(int, Handler) (Registration, error) {
	return Registration{}, errors.New("no socket watcher on this platform")
}

// Remove does nothing: no registration is ever made on this platform.
func (w *Watcher) Remove(*Registration) {}

// Move reports false: no registration is ever made on this platform.
func (w *Watcher) Move(Registration, Handler) bool { return false }

// Registered returns 0: no registration is ever made on this platform.
func (w *Watcher) Registered() uint64 { return 0 }

// Stop does nothing.
func (w *Watcher) Stop() {}
