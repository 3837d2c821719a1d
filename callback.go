package advisory

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// The boundary for user callbacks: the hooks (WithHooks) and the logger's handler
// (WithLogger) are the caller's code, run on the library's paths, some of them on the
// library's own goroutines (the loss watcher, timers). Every such call goes through
// callUser, after the library's state is final for the event (the lock held and handed
// out, or given back and Done closed), so that whatever the callback does leaves nothing
// half done. A panic in a callback is recovered, not re-raised: re-raised on a watcher
// goroutine it would kill the process, and on a caller's it would lose the *Lock of a
// held lock. It is reported once per call on the logger at Error (itself guarded), and
// the library goes on.

// callUser runs f, a user callback named what, and recovers a panic in it.
func callUser(logger *slog.Logger, what string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			reportPanic(logger, what, p)
		}
	}()
	f()
}

// reportPanic logs a callback's panic at Error on logger, unless logger is nil or the
// panic was the logger's own (its handler would panic again).
func reportPanic(logger *slog.Logger, what string, p any) {
	if logger == nil || what == "logger" {
		return
	}
	defer func() { recover() }() // a handler that panics on this record too
	logger.LogAttrs(context.Background(), slog.LevelError, "advisory: a "+what+" panicked; the library recovered and went on",
		slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
}

// logAttrs logs a record on logger through the boundary.
func logAttrs(logger *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	if logger == nil {
		return
	}
	callUser(logger, "logger", func() { logger.LogAttrs(context.Background(), level, msg, attrs...) })
}
