package advisory

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// libpqKeepaliveKeys are libpq's client keepalive settings. pgx does not know them and
// would send them to the server as session parameters: keepalives_idle=5 then fails the
// connect (no such server setting) and tcp_user_timeout=5000 silently becomes the server
// end's setting instead of the client's. Users paste libpq connection strings, so the
// library takes these keys out and applies them to the client end, as libpq does.
var libpqKeepaliveKeys = []string{"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout"}

// libpqRange is the range each key accepts, in its own unit. libpq reads them as C ints;
// the kernel takes idle and interval in seconds up to 32767 and at most 127 probes. 0
// means "the system default" to libpq for all but keepalives: for idle, interval and
// count that default (2 hours idle, here) would void the loss-detection bound, so it is
// refused; tcp_user_timeout=0 means the library's own derived default.
var libpqRange = map[string][2]int{
	"keepalives":          {0, 1 << 31},
	"keepalives_idle":     {1, 32767},
	"keepalives_interval": {1, 32767},
	"keepalives_count":    {1, 127},
	"tcp_user_timeout":    {0, 24 * 3600 * 1000},
}

// takeLibpqKeepalive removes the libpq keepalive keys from params and applies them to the
// client keepalive in set. It refuses keepalives=0 (keepalive is how a holder learns of a
// partition), values that are not whole numbers or out of range (no silent overflow), and
// records the keys it found: settings.check refuses them beside WithClientKeepalive.
func takeLibpqKeepalive(params map[string]string, set *settings) error {
	found := map[string]int{}
	for _, key := range libpqKeepaliveKeys {
		v, ok := params[key]
		if !ok {
			continue
		}
		delete(params, key)
		n, err := libpqInt(key, v)
		if err != nil {
			return err
		}
		found[key] = n
	}
	if len(found) == 0 {
		return nil
	}
	if n, ok := found["keepalives"]; ok && n == 0 {
		return fmt.Errorf("%w: connection string: keepalives=0: advisory needs TCP keepalive, it is how a "+
			"holder learns that a silent network cut its lock away", ErrInvalidOption)
	}
	delete(found, "keepalives")
	if set.libpqKeepalive = keys(found); set.clientKeepaliveSet {
		return nil // settings.check refuses keys given with WithClientKeepalive
	}
	k := &set.clientKeepalive
	for key, n := range found {
		switch key {
		case "keepalives_idle":
			k.Idle = time.Duration(n) * time.Second
		case "keepalives_interval":
			k.Interval = time.Duration(n) * time.Second
		case "keepalives_count":
			k.Count = n
		case "tcp_user_timeout":
			k.UserTimeout = time.Duration(n) * time.Millisecond // libpq: milliseconds, 0 = system default
		}
	}
	return nil
}

func libpqInt(key, v string) (int, error) {
	r := libpqRange[key]
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < int64(r[0]) || n > int64(r[1]) {
		unit := map[string]string{"keepalives_idle": " seconds", "keepalives_interval": " seconds",
			"tcp_user_timeout": " milliseconds"}[key]
		return 0, fmt.Errorf("%w: connection string: %s=%q: want a whole number from %d to %d%s",
			ErrInvalidOption, key, v, r[0], r[1], unit)
	}
	return int(n), nil
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for _, k := range libpqKeepaliveKeys {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}
