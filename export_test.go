package advisory

// WithCheckedStatementsForTest makes every connection of the Manager keep the
// per-statement ownership check, as a connection through a proxy does, so that tests
// can run the checked statements against the test server's direct connections.
func WithCheckedStatementsForTest() Option {
	return Option{apply: func(s *settings) error { s.checkedOnly = true; return nil }}
}
