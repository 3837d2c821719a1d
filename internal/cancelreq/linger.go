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
// CancelRequest; under TLS, where that message is encrypted, by never having been marked
// as a connection of the protocol (see [Cancels.MarkMain]). The zero Cancels is ready to
// use; it is safe for concurrent use.
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

// What a lingerConn's first messages say it is.
const (
	unknown   int32 = iota // nothing written yet
	plain                  // a connection of the protocol: closed at once
	cancelled              // a CancelRequest sent in the clear
	sslAsked               // an SSLRequest sent, its answer not read yet
	encrypted              // TLS on: a cancel connection unless MarkMain said otherwise
)

// sslRequestCode is the code of an SSLRequest message, after its length.
const sslRequestCode = 80877103

// lingerConn is a connection made by Cancels.Dial.
type lingerConn struct {
	net.Conn
	owner      *Cancels
	kind       atomic.Int32 // unknown, plain, cancelled, sslAsked or encrypted
	main       atomic.Bool  // see Cancels.MarkMain
	readFailed atomic.Bool  // under TLS, a read failed (see writeEncrypted)
	flights    atomic.Int32 // under TLS, whole writes (see cancelFlights)
	closed     sync.Once
}

// MarkMain tells the Cancels that conn (made by its Dial, perhaps under TLS) carries a
// connection of the protocol, not a cancel: pgconn.Config's AfterNetConnect, which pgx
// calls for every connection it opens and never for a cancel connection, calls it. Under
// TLS a cancel is known only so: its connection is one never marked.
func (c *Cancels) MarkMain(conn net.Conn) {
	for conn != nil {
		if lc, ok := conn.(*lingerConn); ok {
			lc.main.Store(true)
			return
		}
		nc, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		conn = nc.NetConn()
	}
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

// Write tells the connection's kind by its first write. A CancelRequest counts only if
// it was sent whole: one that was not (a deadline came first) leaves the server waiting
// for the rest of a message, a state PgBouncer closes safely, and the server would never
// close the connection by itself.
func (c *lingerConn) Write(b []byte) (int, error) {
	if k := c.kind.Load(); k == encrypted && !c.main.Load() && len(b) > 0 {
		return c.writeEncrypted(b)
	} else if k != unknown || !c.kind.CompareAndSwap(unknown, plain) {
		return c.Conn.Write(b)
	}
	n, err := c.Conn.Write(b)
	switch {
	case isRequest(b, cancelRequestCode) && n == len(b):
		c.owner.add()
		c.kind.Store(cancelled)
	case isRequest(b, sslRequestCode):
		c.kind.Store(sslAsked)
	case len(b) > 0 && b[0] == 0x16: // a TLS handshake at once (sslnegotiation=direct)
		c.kind.Store(encrypted)
	}
	return n, err
}

// writeEncrypted writes to a TLS connection not (yet) marked as one of the protocol.
// Once a read on it has failed (the caller's deadline cut its wait for the server's
// answer, or the server closed it), the only write left is TLS's close_notify, which
// tells the server the client is gone as surely as closing the socket would: PgBouncer
// would then abandon the cancel (and 1.18 exit). It is not sent; the server's own close
// ends the connection (see linger).
func (c *lingerConn) writeEncrypted(b []byte) (int, error) {
	if c.readFailed.Load() {
		return len(b), nil
	}
	n, err := c.Conn.Write(b)
	if n == len(b) {
		c.flights.Add(1)
	}
	return n, err
}

// cancelFlights is how many whole writes a TLS cancel connection makes up to its
// CancelRequest: the ClientHello, the client's last handshake flight (crypto/tls writes
// each flight at once), then the CancelRequest's record. One that made fewer never sent
// its cancel (a deadline cut the handshake short): it is closed at once, since the
// server would wait for the rest of the handshake.
const cancelFlights = 3

// Read reads the server's answer to an SSLRequest ('S': TLS follows), and notes a
// failed read under TLS (see writeEncrypted).
func (c *lingerConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.kind.Load() == encrypted && !c.main.Load() {
		c.readFailed.Store(true)
	}
	if n > 0 && c.kind.Load() == sslAsked {
		if b[0] == 'S' {
			c.kind.Store(encrypted)
		} else {
			c.kind.Store(plain)
		}
	}
	return n, err
}

// Close closes a connection that is not a cancel connection at once. A cancel
// connection's Close returns at once too, but the connection stays open until its server
// closes it: then the cancel has been delivered (or refused), never abandoned.
func (c *lingerConn) Close() error {
	switch c.kind.Load() {
	case cancelled:
	case encrypted:
		if c.main.Load() || c.flights.Load() < cancelFlights {
			return c.Conn.Close()
		}
		c.closed.Do(func() {
			c.owner.add()
			go c.linger()
		})
		return nil
	default:
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

// isRequest reports whether b is a message without a type byte (CancelRequest,
// SSLRequest) of the given code.
func isRequest(b []byte, code uint32) bool {
	return len(b) >= 8 && binary.BigEndian.Uint32(b[4:8]) == code
}
