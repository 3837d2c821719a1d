package checkctx_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/checkctx"
)

func TestCancelAtCountsErr(t *testing.T) {
	c := checkctx.CancelAt(context.Background(), 3)
	c.Done() // not a check
	require.NoError(t, c.Err())
	require.NoError(t, c.Err())
	require.ErrorIs(t, c.Err(), context.Canceled)
	require.ErrorIs(t, c.Err(), context.Canceled)
	assert.Equal(t, 3, c.Checks())
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed with Err set")
	}
}

func TestCancelAtDoneCountsDone(t *testing.T) {
	c := checkctx.CancelAtDone(context.Background(), 2)
	require.NoError(t, c.Err()) // not a check
	select {
	case <-c.Done():
		t.Fatal("cancelled at the first look")
	default:
	}
	<-c.Done() // the second look cancels it before it returns
	require.ErrorIs(t, c.Err(), context.Canceled)
	assert.Equal(t, 2, c.Checks())
}

func TestParentEnds(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	c := checkctx.CancelAt(parent, 100)
	cancel()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the parent's end did not reach the context")
	}
	require.ErrorIs(t, c.Err(), context.Canceled)
}

// TestDerivedContextsRegister: a context derived from a Context and context.AfterFunc
// register through its AfterFunc (no goroutine of theirs looks at Done), and end with it.
func TestDerivedContextsRegister(t *testing.T) {
	c := checkctx.CancelAtDone(context.Background(), 1000)
	child, cancel := context.WithCancel(c)
	defer cancel()
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	stopped := context.AfterFunc(c, func() { t.Error("a stopped AfterFunc ran") })
	require.True(t, stopped())
	require.False(t, stopped())
	before := c.Checks()
	time.Sleep(10 * time.Millisecond)
	assert.Equal(t, before, c.Checks(), "no goroutine looks at Done meanwhile")
	for c.Err() == nil {
		c.Done()
	}
	<-ran
	<-child.Done()
	require.ErrorIs(t, child.Err(), context.Canceled)
	late := make(chan struct{})
	context.AfterFunc(c, func() { close(late) }) // registered after the end: runs at once
	<-late
}
