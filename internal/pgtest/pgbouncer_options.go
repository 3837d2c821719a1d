package pgtest

// PgBouncerOption changes one setting of a PgBouncer started by [StartPgBouncer].
type PgBouncerOption func(*pgbouncerSettings)

type pgbouncerSettings struct {
	connectQuery           string
	clientIdleTimeout      int
	poolSize               int    // 0: PgBouncerPoolSize or PgBouncerSessionPoolSize
	idleTransactionTimeout int    // seconds; 0: off
	keepalive              [3]int // tcp_keepidle, tcp_keepintvl, tcp_keepcnt; zeros: the OS's
	userTimeout            int    // tcp_user_timeout in ms; 0: the OS's
	net                    *PoolerNet
	clientTLS              bool // see WithClientTLS
}

// WithClientIdleTimeout sets client_idle_timeout: PgBouncer closes a client connection idle
// that many seconds, as proxies' idle reapers do. The default is PgBouncer's, 0: never.
func WithClientIdleTimeout(seconds int) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.clientIdleTimeout = seconds }
}

// WithConnectQuery sets the database's connect_query: SQL PgBouncer runs on every new
// server connection before any client uses it, for example SETs that give its sessions
// settings other than the server's defaults (so that a client's SET of the default value
// is seen if it leaks). Session mode's DISCARD ALL resets such SETs. The default is none.
func WithConnectQuery(sql string) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.connectQuery = sql }
}

// WithPoolSize sets default_pool_size, the most server connections PgBouncer opens. The
// default is [PgBouncerPoolSize] ([PgBouncerSessionPoolSize] in session mode).
func WithPoolSize(n int) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.poolSize = n }
}

// WithIdleTransactionTimeout sets idle_transaction_timeout: PgBouncer disconnects a
// client idle in a transaction that many seconds (and closes its server connection, so
// the transaction ends and its locks go). The default is PgBouncer's, 0: never.
func WithIdleTransactionTimeout(seconds int) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.idleTransactionTimeout = seconds }
}

// WithTCPKeepalive sets PgBouncer's tcp_keepidle, tcp_keepintvl and tcp_keepcnt (seconds,
// seconds, probes). PgBouncer applies them to every TCP socket it has: its clients' and
// its server connections alike. The default is the OS's (Linux: 7200 s, 75 s, 9).
func WithTCPKeepalive(idle, interval, count int) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.keepalive = [3]int{idle, interval, count} }
}

// WithTCPUserTimeout sets PgBouncer's tcp_user_timeout (milliseconds), on its clients'
// sockets and its server connections alike. The default is the OS's, 0.
func WithTCPUserTimeout(ms int) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.userTimeout = ms }
}

// WithPoolerNet runs PgBouncer in n's pooler namespace, listening on all its addresses:
// clients in n's client namespace reach it at [PoolerNet.ClientDSN], the test process on
// the host at [PgBouncer.DSN], and it reaches the server at [PoolerNet.ServerAddr] (the
// server must listen there). The default is the host's loopback.
func WithPoolerNet(n *PoolerNet) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.net = n }
}
