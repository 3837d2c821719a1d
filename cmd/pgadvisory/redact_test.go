package main_test

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// secret is the password of every connection string in these tests; no part of it may
// ever be printed.
const secret = "S3cr3tPw"

func assertNoSecret(t *testing.T, r result, msgAndArgs ...any) {
	t.Helper()
	for _, part := range []string{secret, "S3cr", "3tPw"} {
		assert.NotContains(t, r.stdout+r.stderr, part, msgAndArgs...)
	}
}

// TestPasswordsAreNeverPrinted: connection strings in the wrong place, unparsable ones,
// unreachable servers: the message says what is wrong, never the password.
func TestPasswordsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	url := "postgres://u:" + secret + "@h/x"
	for _, tc := range []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{nil, []string{"status", url}, 64, `unexpected argument "postgres://u:xxxxx@h/x"`},
		{nil, []string{"status", "host=h password = " + secret}, 64, "unexpected argument"},
		{nil, []string{"status", `host=h password='S3cr\'3tPw x'`}, 64, "unexpected argument"},
		{nil, []string{"run", "--name", "k", url, "--", "true"}, 127, `command not found: "postgres://u:xxxxx@h/x"`},
		{nil, []string{"run", "--name", "k", "--", "host=h sslpassword=" + secret}, 127, "command not found"},
		{nil, []string{url}, 64, "unknown command"},
		{nil, []string{"--bogus=" + url, "status"}, 64, "unknown flag"},
		{nil, []string{"run", "--wait", "password=" + secret, "--name", "k", "--", "true"}, 64, "not a duration"},
		{nil, []string{"status", "--json=" + url}, 64, "not a boolean"},
		{nil, []string{"--dsn", "postgres://u:" + secret + "@h:notaport/x", "status"}, 64, "invalid connection settings (from --dsn)"},
		{nil, []string{"--dsn", "postgres://u:S3cr/3tPw@h/x", "status"}, 64, "invalid connection settings"},
		{nil, []string{"--dsn", "postgres://u:S3cr 3tPw@h/x", "status"}, 64, "invalid connection settings"},
		{nil, []string{"status", "--dsn", "host=h password='S3cr3tPw port=5432"}, 64, "invalid connection settings"},
		{nil, []string{"status", "--dsn", `host=h password = 'S3cr\'3tPw' port=x`}, 64, "invalid connection settings"},
		{[]string{"DATABASE_URL=postgres://u:" + secret + "@h:xx/db"}, []string{"status"}, 64, "(from $DATABASE_URL)"},
		{[]string{"DATABASE_URL=postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=2"}, []string{"status"}, 69, "cannot connect"},
		{nil, []string{"run", "--connect-timeout", "0", "--dsn", "host=127.0.0.1 port=1 password = " + secret + " connect_timeout=2", "--name", "k", "--", "true"}, 69, "cannot connect"},
		{nil, []string{"run", "--connect-timeout", "1s", "--dsn", "host=127.0.0.1 port=1 password = " + secret, "--name", "k", "--", "true"}, 69, "retrying for up to 1s"},
	} {
		env := append([]string{"DATABASE_URL="}, tc.env...)
		r := wait(t, startEnv(t, env, tc.args...))
		assert.Equal(t, tc.code, r.code, "%q: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, "%q", tc.args)
		assertNoSecret(t, r, "%q %q", tc.env, tc.args)
	}
}

// TestPasswordIsNotPrintedWhenTheServerRefusesIt: a wrong password against a server that
// asks for one.
func TestPasswordIsNotPrintedWhenTheServerRefusesIt(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go refuseEveryPassword(ln)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	r := noDB(t, "status", "--dsn", "postgres://bob:"+secret+"@127.0.0.1:"+port+"/db?sslmode=disable")
	assert.Equal(t, 69, r.code, r.stderr)
	assert.Contains(t, r.stderr, "cannot connect")
	assertNoSecret(t, r)
}

// refuseEveryPassword is a PostgreSQL server that asks for a cleartext password and then
// fails the login with an error that repeats it, as a hostile or buggy server might.
func refuseEveryPassword(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 4096)
			if _, err := c.Read(buf); err != nil { // the startup message
				return
			}
			c.Write([]byte{'R', 0, 0, 0, 8, 0, 0, 0, 3}) // AuthenticationCleartextPassword
			n, err := c.Read(buf)
			if err != nil || n < 6 {
				return
			}
			pw := strings.TrimRight(string(buf[5:n]), "\x00")
			c.Write(errorResponse("FATAL", "28P01", "password="+pw+" is wrong, and so is postgres://bob:"+pw+"@h"))
		}()
	}
}

func errorResponse(severity, code, msg string) []byte {
	body := "S" + severity + "\x00" + "V" + severity + "\x00" + "C" + code + "\x00" + "M" + msg + "\x00\x00"
	n := len(body) + 4
	return append([]byte{'E', byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}
