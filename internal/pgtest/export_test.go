package pgtest

// FirstPortForTest makes the next PgBouncer start try port, as if FreePort had returned
// it: another process's port, to meet the race between FreePort and PgBouncer's bind.
func FirstPortForTest(port int) { firstPort.Store(int64(port)) }

// StartContainerForTest runs the container step of Start alone (see startContainer).
var StartContainerForTest = startContainer

// PatroniHAProxyConfigForTest is the HAProxy configuration of a Patroni cluster.
var PatroniHAProxyConfigForTest = patroniHAProxyConfig
