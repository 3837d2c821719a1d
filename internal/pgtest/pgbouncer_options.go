package pgtest

// PgBouncerOption changes one setting of a PgBouncer started by [StartPgBouncer].
type PgBouncerOption func(*pgbouncerSettings)

type pgbouncerSettings struct {
	connectQuery      string
	clientIdleTimeout int
	poolSize          int
}

// WithPoolSize sets default_pool_size, the server connections PgBouncer opens at most:
// room for a test whose clients hold many transactions open at once (each pins one
// server connection for its length in transaction mode). The default is
// [PgBouncerPoolSize], [PgBouncerSessionPoolSize] in session mode.
func WithPoolSize(n int) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.poolSize = n }
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
