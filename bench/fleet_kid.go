package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// The fleet's replicas as the parent sees them: started, read and stopped, and their
// latency histograms merged.

// histQuantile returns the q-quantile of a merged latency histogram, in ms.
func histQuantile(h map[int]uint64, q float64) float64 {
	var keys []int
	var total uint64
	for b, n := range h {
		keys, total = append(keys, b), total+n
	}
	sort.Ints(keys)
	var seen uint64
	for _, b := range keys {
		if seen += h[b]; float64(seen) >= q*float64(total) {
			return histValue(b)
		}
	}
	return 0
}

// fleetKid is one running replica.
type fleetKid struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startKid(self, dsn string, spec childSpec) (*fleetKid, error) {
	cmd, in, out, err := spawn(self, "fleet", dsn, fleetSpecEnv, spec)
	if err != nil {
		return nil, err
	}
	return &fleetKid{cmd: cmd, stdin: in, out: bufio.NewReader(out)}, nil
}

// spawn starts this bench binary in role, with the server's dsn and spec (as JSON in
// specEnv), and returns its stdin and stdout.
func spawn(self, role, dsn, specEnv string, spec any) (*exec.Cmd, io.WriteCloser, io.ReadCloser, error) {
	b, _ := json.Marshal(spec)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "BENCH_DSN="+dsn, specEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	return cmd, in, out, nil
}

func (k *fleetKid) waitLine(want string) error {
	line, err := k.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != want {
		return fmt.Errorf("fleet replica: %q %v", strings.TrimSpace(line), err)
	}
	return nil
}

func (k *fleetKid) result() (childResult, error) {
	var r childResult
	line, err := k.out.ReadString('\n')
	if err != nil {
		return r, fmt.Errorf("fleet replica: %v", err)
	}
	return r, json.Unmarshal([]byte(line), &r)
}

// stop closes the replica's stdin (it exits, closing its connections) and reaps it.
func (k *fleetKid) stop() {
	k.stdin.Close()
	done := make(chan struct{})
	go func() { k.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		k.cmd.Process.Kill()
		<-done
	}
}
