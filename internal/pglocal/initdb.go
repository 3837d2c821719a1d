package pglocal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// initdbArgs are the options of every cluster's initdb, before -D.
var initdbArgs = []string{"--no-sync", "-A", "trust", "-E", "UTF8", "--locale=C", "-U", "postgres"}

// A data directory fresh from initdb is the same for every cluster made with the same
// binaries and options: the package makes it once and copies it for each cluster. initdb
// costs about 0.65 s of CPU on the 2-core test machine (a bootstrap and a single-user
// server), a copy of its 39 MB 0.04 s, and a run of the test suite makes a few dozen
// clusters in half a dozen processes. The copy is kept in the user's cache directory
// (initdbCacheDir), keyed by the binaries and the options, so that every test process,
// and every later run, copies it; a key changes when the binaries do (path, size, time of
// modification). A cluster whose copy cannot be made or kept runs initdb, as before.

// initdbData makes dir (which must not exist) a fresh data directory: a copy of the
// cached one, else a new initdb, which it then caches.
func (c *Cluster) initdbData(ctx context.Context, dir string) error {
	cached, key := initdbCache(c.bin)
	if cached != "" {
		if _, err := os.Stat(filepath.Join(cached, "PG_VERSION")); err == nil {
			if err := copyTree(ctx, cached, dir); err == nil {
				return nil
			}
			os.RemoveAll(dir) // a partial copy: make it afresh
		}
	}
	cmd := c.command(ctx, "initdb", append(append([]string{}, initdbArgs...), "-D", dir)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	if cached != "" {
		keepInitdb(ctx, dir, cached, key)
	}
	return nil
}

// initdbCache returns where the data directory of bin's initdb is cached and its key, or
// "" when there is no cache directory or the binaries cannot be read.
func initdbCache(bin string) (dir, key string) {
	root, err := initdbCacheDir()
	if err != nil {
		return "", ""
	}
	h := sha256.New()
	fmt.Fprintln(h, "pglocal initdb 1", strings.Join(initdbArgs, " "))
	for _, name := range []string{"initdb", "postgres"} {
		p, err := filepath.EvalSymlinks(filepath.Join(bin, name))
		if err != nil {
			return "", ""
		}
		st, err := os.Stat(p)
		if err != nil {
			return "", ""
		}
		fmt.Fprintln(h, p, st.Size(), st.ModTime().UnixNano())
	}
	key = hex.EncodeToString(h.Sum(nil))[:16]
	return filepath.Join(root, "initdb-"+key), key
}

// initdbCacheDir returns the directory that holds cached data directories, made if
// missing: pgadvisory-test under the user's cache directory (os.UserCacheDir).
func initdbCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "pgadvisory-test")
	return dir, os.MkdirAll(dir, 0o755)
}

// keepInitdb copies the fresh data directory src to cached, through a staging directory
// renamed into place, so that a reader sees a whole copy or none. Another process that
// cached the same key first wins; a failure only leaves the cache empty.
func keepInitdb(ctx context.Context, src, cached, key string) {
	stage, err := os.MkdirTemp(filepath.Dir(cached), ".stage-"+key+"-")
	if err != nil {
		return
	}
	defer os.RemoveAll(stage)
	if err := copyTree(ctx, src, filepath.Join(stage, "data")); err != nil {
		return
	}
	os.Rename(filepath.Join(stage, "data"), cached) // taken already: the other copy serves
}

// copyTree copies the directory src to dst (which must not exist) with cp -a: modes,
// owners and times kept. It runs as the caller: root may read a cache under its home
// directory, which the postgres user may not, and keeps the postgres user the owner.
func copyTree(ctx context.Context, src, dst string) error {
	if out, err := exec.CommandContext(ctx, "cp", "-a", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, out)
	}
	return nil
}
