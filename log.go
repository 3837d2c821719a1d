package advisory

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// WithLogger makes the Manager report lock events to logger: "lock acquired" and "lock
// released" (Debug), "waiting for lock" with the holders when a Lock has waited 1 s
// (Info; Warn, "waiting for a lock this Manager holds", with how to re-enter, when the
// holder is a session of this Manager, or a Lock is queued that long behind one that may
// hand off), "lock lost" with its cause (Warn), and a Lock or TryLock tried once more because
// its connection was found dead or its session ended before it returned (Warn, with the
// cause). Every record carries the lock's key and,
// when it has one, its name and the backend pid. The default is no logging. It panics if
// logger is nil. A panic in the logger's handler is recovered and dropped: the library
// goes on as if the record had been written.
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("advisory: WithLogger(nil)")
	}
	return option(func(s *settings) error { s.logger = logger; return nil })
}

// waitLogAfter is how long a Lock waits before the wait is logged with its holders.
const waitLogAfter = time.Second

func (p *pin) attrs(extra ...slog.Attr) []slog.Attr {
	a := []slog.Attr{slog.Int64("key", int64(p.key)), slog.Uint64("pid", uint64(p.pid))}
	if p.name != "" {
		a = append(a, slog.String("name", p.name))
	}
	if p.shared {
		a = append(a, slog.Bool("shared", true))
	}
	return append(a, extra...)
}

func (p *pin) log(level slog.Level, msg string, extra ...slog.Attr) {
	if l := p.m.set.logger; l != nil {
		logAttrs(l, level, msg, p.attrs(extra...)...)
	}
}

// logWaitLater arms the "waiting for lock" record for a Lock that is still waiting after
// waitLogAfter; the returned func disarms it.
func (p *pin) logWaitLater(ctx context.Context) func() bool {
	if p.m.set.logger == nil {
		return func() bool { return false }
	}
	start := time.Now()
	t := time.AfterFunc(waitLogAfter, func() { p.logWait(ctx, start) })
	return t.Stop
}

// selfWaitHint is the advice of the record of a Lock that waits for a holding of its
// own Manager: if the caller runs under that holding, the wait never ends.
const selfWaitHint = "held by this Manager; if this call runs under that holding, the wait never ends: " +
	"a nested Lock must carry the holding's ctx (LockFromContext, ContextWithLock) to re-enter it"

// logWait records a Lock still waiting on the server, with the lock's holders (Info);
// if one of them is a backend of this Manager, or a Lock of this Manager holds the lock,
// a Warn with selfWaitHint.
func (p *pin) logWait(ctx context.Context, start time.Time) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hs, err := p.m.holders(qctx, false, p.key, p.pair)
	var holders []slog.Attr
	own := false
	for _, h := range hs {
		if h.Granted {
			holders = append(holders, slog.Group("holder", slog.Uint64("pid", uint64(h.PID)),
				slog.String("application_name", h.ApplicationName), slog.String("client", h.ClientAddr),
				slog.Time("since", h.Since)))
			own = own || p.m.ownsBackend(h.PID, p)
		}
	}
	if err != nil {
		holders = append(holders, slog.String("holders_error", err.Error()))
	}
	attrs := append(holders, slog.Duration("waited", time.Since(start).Round(time.Millisecond)))
	if own || p.m.holdsKey(p) { // the second also when the holders could not be read
		p.log(slog.LevelWarn, "advisory: waiting for a lock this Manager holds", append(attrs, slog.String("hint", selfWaitHint))...)
		return
	}
	p.log(slog.LevelInfo, "advisory: waiting for lock", attrs...)
}

// logAcquired records a granted lock (Debug).
func (p *pin) logAcquired(start time.Time) {
	if p.m.set.logger != nil {
		p.log(slog.LevelDebug, "advisory: lock acquired", slog.Duration("waited", time.Since(start).Round(time.Microsecond)))
	}
}

// logEnd records how a session ended: a loss (Warn) or a release (Debug).
func (p *pin) logEnd(err error, heldSince time.Time) {
	if p.m.set.logger == nil {
		return
	}
	held := slog.Duration("held", time.Since(heldSince).Round(time.Microsecond))
	if errors.Is(err, ErrLockLost) {
		p.log(slog.LevelWarn, "advisory: lock lost", held, slog.String("cause", err.Error()))
		return
	}
	p.log(slog.LevelDebug, "advisory: lock released", held)
}
