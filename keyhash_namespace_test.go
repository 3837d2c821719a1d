package advisory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

func TestNamespacesDoNotCollide(t *testing.T) {
	t.Parallel()
	billing := newManager(t, nil, advisory.WithNamespace("billing"))
	billing2 := newManager(t, nil, advisory.WithNamespace("billing"))
	shipping := newManager(t, nil, advisory.WithNamespace("shipping"))
	ctx := ctxT(t)
	name := t.Name()

	b, err := billing.Lock(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, "billing:"+name, b.Name())
	assert.Equal(t, advisory.KeyOf("billing:"+name), b.Key(), "psql: hashtextextended('billing:NAME', 0)")
	s, err := shipping.TryLock(ctx, name)
	require.NoError(t, err, "another namespace: another lock")
	_, err = billing2.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked, "the same namespace: the same lock")
	hs, err := billing2.Holders(ctx, name)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, "billing:"+name, hs[0].Name)
	require.NoError(t, b.Unlock(ctx))
	require.NoError(t, s.Unlock(ctx))

	for _, bad := range []string{"", "a:b", "nul\x00", "\xff"} {
		_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1", advisory.WithNamespace(bad))
		require.ErrorIs(t, err, advisory.ErrInvalidOption, "%q", bad)
	}
	_, err = billing.Lock(ctx, "")
	require.ErrorIs(t, err, advisory.ErrInvalidKey, "an empty name stays refused inside a namespace")
}
