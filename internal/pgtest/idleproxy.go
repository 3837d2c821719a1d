package pgtest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// IdleProxy is a loopback TCP proxy that closes every connection through it once no byte
// has crossed it either way for its idle limit, as idle reapers in front of PostgreSQL do
// (cloud load balancers, RDS Proxy's IdleClientTimeout, serverless proxies). Close stops it
// and closes every connection.
type IdleProxy struct {
	ln    net.Listener
	to    string
	idle  time.Duration
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartIdleProxy listens on 127.0.0.1 and forwards each connection to target (host:port).
func StartIdleProxy(target string, idle time.Duration) (*IdleProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &IdleProxy{ln: ln, to: target, idle: idle}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Port returns the port the proxy listens on.
func (p *IdleProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *IdleProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c, up)
	}
}

// serve copies both ways and closes both ends when either side ends or the pair has been
// idle for the limit.
func (p *IdleProxy) serve(c, up net.Conn) {
	defer p.wg.Done()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	ended := make(chan struct{}, 2)
	pump := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		ended <- struct{}{}
	}
	go pump(up, c)
	go pump(c, up)
	waited := p.untilIdle(&last, ended)
	c.Close()
	up.Close()
	for ; waited < 2; waited++ {
		<-ended
	}
}

// untilIdle returns when a pump ended (1: it took its report) or the pair has been idle
// for the limit (0).
func (p *IdleProxy) untilIdle(last *atomic.Int64, ended <-chan struct{}) int {
	tick := time.NewTicker(p.idle / 10)
	defer tick.Stop()
	for {
		select {
		case <-ended:
			return 1
		case <-tick.C:
			if time.Since(time.Unix(0, last.Load())) >= p.idle {
				return 0
			}
		}
	}
}

// Close stops the proxy and closes every connection through it.
func (p *IdleProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

var _ io.Closer = (*IdleProxy)(nil)
