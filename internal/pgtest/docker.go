package pgtest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// dockerAnswers reports (nil) whether a Docker engine answers, without a Docker client: it
// sends GET /_ping to the endpoint testcontainers-go would use (dockerHost) and wants an
// HTTP 200 back, the test testcontainers-go itself makes first. It keeps a machine
// without Docker from building the container helper at all.
func dockerAnswers(ctx context.Context) error {
	host, err := dockerHost()
	if err != nil {
		return err
	}
	network, addr, err := dockerAddr(host)
	if err == nil {
		err = dockerPing(ctx, network, addr)
	}
	if err != nil {
		return fmt.Errorf("no Docker engine answers at %s: %w", host, err)
	}
	return nil
}

// dockerHost returns, as a URL, the first endpoint set in testcontainers-go's order:
// tc.host of ~/.testcontainers.properties, DOCKER_HOST, /var/run/docker.sock if it exists,
// docker.host of the properties file, then the rootless sockets that exist
// ($XDG_RUNTIME_DIR/docker.sock, ~/.docker/run/docker.sock,
// ~/.docker/desktop/docker.sock, /run/user/UID/docker.sock).
func dockerHost() (string, error) {
	home, _ := os.UserHomeDir()
	props := testcontainersProperties(filepath.Join(home, ".testcontainers.properties"))
	if h := props["tc.host"]; h != "" {
		return h, nil
	}
	if h := strings.TrimSpace(os.Getenv("DOCKER_HOST")); h != "" {
		return h, nil
	}
	if fileExists("/var/run/docker.sock") {
		return "unix:///var/run/docker.sock", nil
	}
	if h := props["docker.host"]; h != "" {
		return h, nil
	}
	var rootless []string
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		rootless = append(rootless, filepath.Join(d, "docker.sock"))
	}
	if home != "" {
		rootless = append(rootless, filepath.Join(home, ".docker", "run", "docker.sock"),
			filepath.Join(home, ".docker", "desktop", "docker.sock"))
	}
	rootless = append(rootless, fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid()))
	for _, s := range rootless {
		if fileExists(s) {
			return "unix://" + s, nil
		}
	}
	return "", fmt.Errorf("no Docker engine here: DOCKER_HOST is not set and none of %s exists",
		strings.Join(append([]string{"/var/run/docker.sock"}, rootless...), ", "))
}

// fileExists reports whether path names something that exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// testcontainersProperties returns the keys of testcontainers' properties file, if any.
func testcontainersProperties(path string) map[string]string {
	props := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return props
	}
	defer f.Close()
	in := bufio.NewScanner(f)
	for in.Scan() {
		if k, v, ok := strings.Cut(in.Text(), "="); ok {
			props[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return props
}

// dockerAddr turns a Docker host URL (unix:///path, tcp://host:port) into a dial address.
func dockerAddr(host string) (network, addr string, err error) {
	u, err := url.Parse(host)
	if err != nil {
		return "", "", err
	}
	switch u.Scheme {
	case "unix":
		return "unix", u.Path, nil
	case "tcp":
		return "tcp", u.Host, nil
	}
	return "", "", fmt.Errorf("scheme %q is not one this check knows (unix, tcp)", u.Scheme)
}

// dockerPing sends GET /_ping and wants a 200. Over TCP with TLS (DOCKER_TLS_VERIFY) an
// accepted connection is enough: the helper then makes the real handshake.
func dockerPing(ctx context.Context, network, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if network == "tcp" && os.Getenv("DOCKER_TLS_VERIFY") != "" {
		return nil
	}
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if _, err := fmt.Fprintf(conn, "GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n"); err != nil {
		return err
	}
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no answer to GET /_ping: %w", err)
	}
	if f := strings.Fields(status); len(f) < 2 || f[1] != "200" {
		return fmt.Errorf("GET /_ping answered %q", strings.TrimSpace(status))
	}
	return nil
}
