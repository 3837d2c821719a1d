package pgtest

// PgBouncerOption changes one setting of a PgBouncer started by [StartPgBouncer].
type PgBouncerOption func(*pgbouncerSettings)

type pgbouncerSettings struct {
	connectQuery           string
	clientIdleTimeout      int
	idleTransactionTimeout int
	poolSize               int
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

// WithIdleTransactionTimeout sets idle_transaction_timeout: PgBouncer closes a client
// connection that stays idle in a transaction that many seconds (and its server
// connection), as production poolers are often set to. The default is PgBouncer's, 0:
// never.
func WithIdleTransactionTimeout(seconds int) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.idleTransactionTimeout = seconds }
}

// WithPoolSize sets default_pool_size, the most server connections PgBouncer opens, in
// place of [PgBouncerPoolSize] (or [PgBouncerSessionPoolSize] in session mode).
func WithPoolSize(n int) PgBouncerOption {
	return func(s *pgbouncerSettings) { s.poolSize = n }
}
