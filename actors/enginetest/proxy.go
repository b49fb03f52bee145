package enginetest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between the engine and a server (the database) that a
// test can cut, as a network partition would, and restore.
type Proxy struct {
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

// StartProxy proxies a fresh loopback address to target (host:port).
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return StartProxyAt(t, FreeAddr(t), target)
}

// StartProxyAt proxies addr (host:port, free) to target, for a test that
// keeps its listeners to a port band of its own.
func StartProxyAt(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	p := &Proxy{target: target, addr: addr}
	if err := p.listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) listen() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return nil
}

// Cut severs every connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore accepts connections again.
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	if err := p.listen(); err != nil {
		t.Fatal(err)
	}
}

// Via returns the URL raw with its host replaced by the proxy's.
func (p *Proxy) Via(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.addr
	return u.String()
}

// HostOf is the host:port of a URL (5432 when it names no port).
func HostOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		return u.Hostname() + ":5432"
	}
	return u.Host
}
