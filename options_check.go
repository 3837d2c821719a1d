package advisory

import (
	"fmt"
	"log/slog"
	"time"
)

// Every refusal of a combination of options, and of options with the path New finds, is
// decided here, by settings.check, which New calls twice from one place (connect): before
// connecting, with what the options and the connection string say, and once its first
// connection has probed the path, with what it found. A With function refuses only its own
// out-of-range values. Each rule's words name the options involved; the godoc of each of
// them names the refusal (options_doc_test.go keeps that true).

// pathSeen is what New's first connection found between the client and the server.
type pathSeen struct {
	kind     Holding // the kind of holding New chose (see chooseHolding)
	proxied  bool    // a proxy of any kind: a pooler, or a TCP proxy (see proxyState.inPath)
	txPooler bool    // a transaction pooler
	sign     string  // what gave a transaction pooler away to a Manager asked for session holdings
}

// check returns the first refusal of s, an error wrapping ErrInvalidOption (or ErrPooler:
// session holdings asked for behind a transaction pooler), or nil. path is nil before New
// connects: then only what the options and the connection string say is decided, and
// whatever depends on the path is left to the second call. It changes nothing.
func (s *settings) check(path *pathSeen) error {
	for _, rule := range []func(*settings, *pathSeen) error{
		checkKeepalive, checkWaits, checkSharing, checkSessionHoldings, checkHeartbeat,
	} {
		if err := rule(s, path); err != nil {
			return err
		}
	}
	return nil
}

// checkKeepalive: the client's keepalive must tell a holder of a partition before the
// server's frees its lock, by the minimum margin (WithClientKeepalive or libpq's keys in
// the connection string, WithServerKeepalive, WithMinMargin), and the client's keepalive
// is set in one place only.
func checkKeepalive(s *settings, _ *pathSeen) error {
	if len(s.libpqKeepalive) > 0 && s.clientKeepaliveSet {
		return fmt.Errorf("%w: client keepalive set both in the connection string (%v) and with WithClientKeepalive; "+
			"set it in one place", ErrInvalidOption, s.libpqKeepalive)
	}
	return validateTiming(s.clientKeepalive, s.serverKeepalive, s.minMargin)
}

// checkWaits refuses WithWaitSessions without WithSharedSessions.
func checkWaits(s *settings, _ *pathSeen) error {
	if s.waitSessions > 0 && s.sharePer == 0 {
		return fmt.Errorf("%w: WithWaitSessions(%d) without WithSharedSessions: a Lock waits without a session "+
			"by trying again on a shared session", ErrInvalidOption, s.waitSessions)
	}
	return nil
}

// checkSharing refuses shared sessions where the Manager holds by transaction: asked for
// (known before connecting), or chosen behind a transaction pooler.
func checkSharing(s *settings, path *pathSeen) error {
	if s.sharePer == 0 || s.holding != HoldingTransaction && (path == nil || path.kind != HoldingTransaction) {
		return nil
	}
	return fmt.Errorf("%w: WithSharedSessions with transaction holdings (a transaction pooler in the path, "+
		"or WithHolding(HoldingTransaction)): transaction-level locks cannot be released one by one; "+
		"connect directly, or through a session pooler, to share sessions", ErrInvalidOption)
}

// checkSessionHoldings refuses WithHolding(HoldingSession) behind a transaction pooler,
// through which no session-level lock can be held.
func checkSessionHoldings(s *settings, path *pathSeen) error {
	if path == nil || !path.txPooler || s.holding != HoldingSession {
		return nil
	}
	return fmt.Errorf("%w: %s: a transaction pooler, through which no session-level lock can be held, and "+
		"the Manager was asked for session holdings (WithHolding(HoldingSession)): let it hold by transaction "+
		"(the default, or WithHolding(HoldingTransaction)), or connect directly or through session pooling",
		ErrPooler, path.sign)
}

// checkHeartbeat decides the heartbeat behind a proxy (see settings.heartbeatFor): the
// client's keepalives reach only the proxy, which answers them, so the only sign of a
// server that froze, or of a cut between the proxy and the server, is a statement that
// gets no answer. A heartbeat must then tell the holder before the server can free the
// lock, by the minimum margin: a beat is sent within the period, and fails within
// beatTimeout. Behind a transaction pooler WithHeartbeat(0) is refused: nothing else can
// tell such a holder. Behind another proxy it is allowed (the proxy may close its
// clients' sessions when its health check marks the server down, as HAProxy's
// on-marked-down shutdown-sessions does), with a Warn (settings.complete).
func checkHeartbeat(s *settings, path *pathSeen) error {
	if path == nil || !path.proxied {
		return nil
	}
	beat := s.heartbeatFor(path)
	frees := computeBounds(s.clientKeepalive, s.serverKeepalive).ServerFreesAfter
	switch told := beat + beatTimeout; {
	case beat == 0 && path.kind == HoldingTransaction:
		return fmt.Errorf("%w: WithHeartbeat(0) with transaction holdings behind a proxy (a transaction pooler, or "+
			"WithHolding(HoldingTransaction) behind any proxy): a holder would never learn that the proxy's "+
			"connection to the server was cut, while the server frees its lock after %v; keep the heartbeat on "+
			"(the default there is %v)", ErrInvalidOption, frees, defaultProxyHeartbeat)
	case beat != 0 && told+s.minMargin > frees:
		return fmt.Errorf("%w: heartbeat %v behind a proxy: a holder may learn that the server stopped answering "+
			"(frozen, or cut off from the proxy) only %v after it, but the server may free the lock after %v "+
			"(minimum margin %v); shorten the heartbeat or lengthen the server's keepalive (see docs/keepalive.md)",
			ErrInvalidOption, beat, told, frees, s.minMargin)
	}
	return nil
}

// defaultProxyHeartbeat is the heartbeat behind a proxy unless WithHeartbeat says
// otherwise (see settings.heartbeatFor).
const defaultProxyHeartbeat = 2 * time.Second

// heartbeatFor is the Manager's heartbeat on path: WithHeartbeat's, else
// defaultProxyHeartbeat behind a proxy, else off.
func (s *settings) heartbeatFor(path *pathSeen) time.Duration {
	if s.heartbeatSet || !path.proxied {
		return s.heartbeat
	}
	return defaultProxyHeartbeat
}

// complete sets what the path decides once check(path) passed: the heartbeat, with a Warn
// where it is off behind a proxy.
func (s *settings) complete(path *pathSeen) {
	s.heartbeat = s.heartbeatFor(path)
	if path.proxied && s.heartbeat == 0 {
		s.warnNoHeartbeat(computeBounds(s.clientKeepalive, s.serverKeepalive).ServerFreesAfter)
	}
}

// warnNoHeartbeat says, at Warn, what WithHeartbeat(0) behind a proxy gives up.
func (s *settings) warnNoHeartbeat(frees time.Duration) {
	if s.logger == nil {
		return
	}
	logAttrs(s.logger, slog.LevelWarn, "advisory: WithHeartbeat(0) behind a proxy: the proxy answers the "+
		"client's keepalives, so a holder is told of a server that froze or was cut off from the proxy only if "+
		"the proxy closes its session (HAProxy: on-marked-down shutdown-sessions); otherwise never, while a "+
		"promoted standby or the server may grant the lock again (see docs/keepalive.md)",
		slog.Duration("server_frees_after", frees))
}
