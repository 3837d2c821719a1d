package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// notifySignals delivers SIGINT, SIGTERM, SIGHUP and SIGQUIT to a new channel, except
// those that were ignored when pgadvisory started: under nohup, or as a background job of
// a script, the shell's choice to ignore them stays in force for pgadvisory and for CMD
// (a handled signal would be reset to its default action in CMD). SIGQUIT is handled so
// that it cannot kill pgadvisory and leave CMD running. stop ends the delivery.
func notifySignals() (sigs chan os.Signal, stop func()) {
	var handled []os.Signal
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		if !signal.Ignored(s) {
			handled = append(handled, s)
		}
	}
	sigs = make(chan os.Signal, 8)
	signal.Notify(sigs, handled...)
	return sigs, func() { signal.Stop(sigs) }
}

// interrupter turns the first signal that arrives before it is ended into the
// cancellation of a context: a signal must end a connect or a wait at once.
type interrupter struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
	sig  os.Signal // set by the watching goroutine before done is closed
}

// watchInterrupts returns a context that is cancelled when a signal arrives on sigs, and
// the interrupter that says which signal it was.
func watchInterrupts(sigs <-chan os.Signal) (context.Context, *interrupter) {
	ctx, cancel := context.WithCancel(context.Background())
	in := &interrupter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(in.done)
		select {
		case in.sig = <-sigs:
			cancel()
		case <-in.stop:
		}
	}()
	return ctx, in
}

// end stops watching and returns the signal that cancelled the context, or nil. Signals
// that arrive after end stay in the channel for the next reader. end may be called more
// than once.
func (in *interrupter) end() os.Signal {
	in.once.Do(func() { close(in.stop) })
	<-in.done
	return in.sig
}

// signalName names the signals run handles as people write them.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return sig.String()
}

// signalExitCode is 128+N for signal N, as shells report a death by signal.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + int(s)
	}
	return exitSoftware
}
