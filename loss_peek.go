package advisory

import (
	"encoding/binary"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// A connection that hangs up while a caller's transaction has it (see pin.hungUp) has
// usually been told why first: the server or a pooler sends an ErrorResponse (FATAL
// 57P01 for pg_terminate_backend, PgBouncer's FATAL 08P01 "idle transaction timeout")
// before it closes. The transaction reads its replies itself, and may not read again
// before the loss is reported, so the watcher peeks at what is waiting on the socket
// and, if one of the messages there is an ErrorResponse, names the loss after it.

// peekLimit bounds the bytes peeked: replies to the transaction's statements may come
// before the error.
const peekLimit = 16 << 10

// pendingError returns the error the peer sent last before closing fd, if an
// ErrorResponse waits unread on it; else nil.
func pendingError(fd int) *pgconn.PgError {
	buf := make([]byte, peekLimit)
	return lastErrorResponse(buf[:sockfd.Peek(fd, buf)])
}

// lastErrorResponse returns the last ErrorResponse among the whole protocol messages in
// b, or nil.
func lastErrorResponse(b []byte) *pgconn.PgError {
	var last *pgconn.PgError
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n < 4 || n+1 > len(b) {
			break
		}
		if b[0] == 'E' {
			last = errorFields(b[5 : n+1])
		}
		b = b[n+1:]
	}
	return last
}

// errorFields decodes an ErrorResponse's body as pgx does (pgproto3), or returns nil if
// it names no error.
func errorFields(body []byte) *pgconn.PgError {
	var msg pgproto3.ErrorResponse
	if msg.Decode(body) != nil || (msg.Code == "" && msg.Message == "") {
		return nil
	}
	return pgconn.ErrorResponseToPgError(&msg)
}
