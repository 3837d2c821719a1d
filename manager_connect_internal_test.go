package advisory

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckVersion(t *testing.T) {
	for reported, ok := range map[string]bool{
		"11.22 (Debian 11.22-0+deb10u1)": false,
		"9.6.24":                         false,
		"10.23":                          false,
		"12.0":                           true,
		"15.18 (Debian 15.18-0+deb12u1)": true,
		"17beta1":                        true,
		"":                               true, // unknown: the setup statement decides
	} {
		_, err := checkVersion(reported)
		if ok {
			assert.NoError(t, err, reported)
			continue
		}
		require.ErrorIs(t, err, ErrUnsupportedServer, reported)
		assert.Contains(t, err.Error(), "the minimum is 12", reported)
		assert.Contains(t, err.Error(), reported)
	}
}

// An unknown setting in the setup statement (as PostgreSQL 11 answers SET
// tcp_user_timeout) is explained, with the server's own error kept reachable.
func TestSetupErrorNamesTheSetting(t *testing.T) {
	_, admin := internalManager(t)
	_, err := admin.Exec(context.Background(), "SET tcp_user_timeouts = 1000")
	require.Error(t, err)
	got := setupError(err, "11.22")
	assert.Contains(t, got.Error(), "PostgreSQL 11.22 rejected a setting every lock connection needs")
	assert.Contains(t, got.Error(), `"tcp_user_timeouts"`)
	require.ErrorIs(t, got, err)
}
