//go:build !amd64 && !arm64

package pgtest

// sysSetns is unknown here: entering a namespace fails with ENOSYS.
const sysSetns = -1
