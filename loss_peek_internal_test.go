package advisory

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// message frames a protocol message of type typ.
func message(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

func TestLastErrorResponse(t *testing.T) {
	fatal := message('E', "SFATAL\x00C08P01\x00Midle transaction timeout\x00\x00")
	row := message('D', "\x00\x01\x00\x00\x00\x011")
	e := lastErrorResponse(append(append(row, fatal...), row[:3]...))
	require.NotNil(t, e)
	require.Equal(t, "FATAL", e.Severity)
	require.Equal(t, "08P01", e.Code)
	require.Equal(t, "idle transaction timeout", e.Message)
	require.Nil(t, lastErrorResponse(row))
	require.Nil(t, lastErrorResponse(fatal[:len(fatal)-3]), "a message cut short is not read")
	require.Nil(t, lastErrorResponse(nil))
}

// FuzzLastErrorResponse: whatever the peer sent, reading it never panics.
func FuzzLastErrorResponse(f *testing.F) {
	f.Add(message('E', "SFATAL\x00C57P01\x00Mterminating\x00\x00"))
	f.Add([]byte("E\x00\x00\x00\x04"))
	f.Add([]byte("E\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) { lastErrorResponse(b) })
}
