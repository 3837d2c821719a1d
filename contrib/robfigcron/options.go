package advrobfigcron

import (
	"context"

	"github.com/robfig/cron/v3"
)

// Option configures [OnOneReplica].
type Option func(*options)

type options struct {
	logger cron.Logger
	ctx    context.Context
}

func newOptions(opts []Option) options {
	o := options{logger: cron.DefaultLogger, ctx: context.Background()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithLogger sets the cron.Logger that skips (Info) and failures (Error) are reported to;
// pass the one given to cron.WithLogger. The default is cron.DefaultLogger, which prints
// errors only (cron.VerbosePrintfLogger prints the skips too). A nil logger panics.
func WithLogger(l cron.Logger) Option {
	if l == nil {
		panic("advrobfigcron: WithLogger with a nil logger")
	}
	return func(o *options) { o.logger = l }
}

// WithContext sets the base context of every run: it governs the try, the context a
// [FuncJob] runs with, and the hold. When it ends, a running FuncJob's context is
// cancelled, a hold ends and the lock is released at once, and later ticks fail at the
// try (logged as errors). The default is context.Background(). A nil ctx panics.
//
// At shutdown, end it after the Cron's Stop, once Stop's context is done (the running
// jobs returned and their holds ended, at most atLeast after their tries), or when that
// wait is over your budget. Ended first, it frees the lock of a tick this replica just
// ran, and a replica whose timer fires late runs that tick again.
func WithContext(ctx context.Context) Option {
	if ctx == nil {
		panic("advrobfigcron: WithContext with a nil context")
	}
	return func(o *options) { o.ctx = ctx }
}
