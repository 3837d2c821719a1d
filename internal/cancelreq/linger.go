package cancelreq

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// errNoSocket is SyscallConn's error for a connection beneath without a socket.
var errNoSocket = errors.New("cancelreq: the connection has no socket descriptor")

// cancelRequestCode is the code of a CancelRequest message, after its length.
const cancelRequestCode = 80877102

// Cancels keeps every cancel connection that a dial function wrapped by [Cancels.Dial]
// made open until the server closes it, and counts those still open, so that their owner
// can wait for them ([Cancels.Wait]) before it exits.
//
// Why: a client that closes a CancelRequest's connection before the server closed it
// abandons the cancel, and PgBouncer 1.18 (Debian's) exits on an abandoned cancel it has
// not forwarded yet ("bad client state: 0", pgbouncer issue 801): an outage for every
// client behind it. pgx closes the cancel connection early whenever the ctx of its
// CancelRequest ends first: its default context handler, its background cancel when a
// connection breaks (15 s), and any caller's bounded CancelRequest. With the wrapper none
// of them can: the caller returns as before, and the connection stays open behind it
// until the server has answered (or the connection dies: its dialer's keepalive bounds a
// peer that vanished).
//
// A connection is known for a cancel connection by its first write, which is a
// CancelRequest: under TLS that message is encrypted and the connection is closed at once,
// as pgx does. The zero Cancels is ready to use; it is safe for concurrent use.
type Cancels struct {
	mu   sync.Mutex
	open int
	idle chan struct{} // closed when open drops to 0; nil while open is 0
}

// Dial wraps dial (pgconn.Config's DialFunc): every connection it returns is closed only
// once its server closed it, if its first write was a CancelRequest; any other connection
// is closed at once, as dial's own. The wrapper lets sockfd reach the socket (NetConn).
func (c *Cancels) Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(
	ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lingerConn{Conn: conn, owner: c}, nil
	}
}

// Open returns how many cancel connections are still open.
func (c *Cancels) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// Wait blocks until every cancel connection has been closed by its server, or ctx ends
// (it then returns ctx.Err(); the connections stay open behind it).
func (c *Cancels) Wait(ctx context.Context) error {
	c.mu.Lock()
	idle := c.idle
	c.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Cancels) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == 0 {
		c.idle = make(chan struct{})
	}
	c.open++
}

func (c *Cancels) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	if c.open == 0 {
		close(c.idle)
		c.idle = nil
	}
}

// lingerConn is a connection made by Cancels.Dial.
type lingerConn struct {
	net.Conn
	owner  *Cancels
	wrote  atomic.Bool // the first write has been seen
	cancel atomic.Bool // the first write was a CancelRequest
	closed sync.Once
}

// NetConn returns the connection beneath, as tls.Conn's does (see sockfd).
func (c *lingerConn) NetConn() net.Conn { return c.Conn }

// SyscallConn returns the socket of the connection beneath, for sockfd under TLS, where
// tls.Conn's NetConn is this connection.
func (c *lingerConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNoSocket
	}
	return sc.SyscallConn()
}

// Write marks the connection as a cancel connection if its first write is a whole
// CancelRequest, sent: one that was not sent (a deadline came first) or only in part
// leaves the server waiting for the rest of a message, a state PgBouncer closes safely,
// and the server would never close the connection by itself.
func (c *lingerConn) Write(b []byte) (int, error) {
	if c.wrote.Load() || !c.wrote.CompareAndSwap(false, true) || !isCancelRequest(b) {
		return c.Conn.Write(b)
	}
	n, err := c.Conn.Write(b)
	if n == len(b) {
		c.owner.add()
		c.cancel.Store(true)
	}
	return n, err
}

// Close closes a connection that is not a cancel connection at once. A cancel
// connection's Close returns at once too, but the connection stays open until its server
// closes it: then the cancel has been delivered (or refused), never abandoned.
func (c *lingerConn) Close() error {
	if !c.cancel.Load() {
		return c.Conn.Close()
	}
	c.closed.Do(func() { go c.linger() })
	return nil
}

// linger reads (and drops) what the server sends until it closes the connection; the
// deadline a caller's ctx left on it is cleared first.
func (c *lingerConn) linger() {
	defer c.owner.done()
	c.Conn.SetDeadline(time.Time{})
	io.Copy(io.Discard, c.Conn)
	c.Conn.Close()
}

func isCancelRequest(b []byte) bool {
	return len(b) >= 8 && binary.BigEndian.Uint32(b[4:8]) == cancelRequestCode
}
