package app

import (
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/net/netutil"
)

// connGuard wraps a listener: it caps the open connections (max > 0;
// netutil.LimitListener, so a connection past the cap waits in the
// kernel's accept queue until one closes) and remembers the open ones, so
// that shutdown can close at once those that have sent nothing yet.
// Neither net/http (which waits 5 s for such a connection) nor grpc-go
// (whose Stop and GracefulStop wait for a connection's handshake, up to
// its connection timeout) would otherwise let go of them.
type connGuard struct {
	net.Listener
	mu     sync.Mutex
	conns  map[*guardedConn]struct{}
	closed bool
}

func guardListener(ln net.Listener, max int) *connGuard {
	if max > 0 {
		ln = netutil.LimitListener(ln, max)
	}
	return &connGuard{Listener: ln, conns: map[*guardedConn]struct{}{}}
}

func (g *connGuard) Accept() (net.Conn, error) {
	c, err := g.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &guardedConn{Conn: c, g: g}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		_ = c.Close()
		return nil, net.ErrClosed
	}
	g.conns[gc] = struct{}{}
	g.mu.Unlock()
	return gc, nil
}

// Close closes the listener; closing it again (the servers' own shutdown
// does) is not an error.
func (g *connGuard) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return g.Listener.Close()
}

// closeSilent closes the listener and the connections that have not sent
// a byte: they carry no call that shutdown should wait for.
func (g *connGuard) closeSilent() {
	_ = g.Close()
	g.mu.Lock()
	var silent []*guardedConn
	for c := range g.conns {
		if !c.spoke.Load() {
			silent = append(silent, c)
		}
	}
	g.mu.Unlock()
	for _, c := range silent {
		_ = c.Close()
	}
}

// guardedConn is an accepted connection that notes its first byte read
// and leaves its guard's set when closed.
type guardedConn struct {
	net.Conn
	g     *connGuard
	spoke atomic.Bool
	once  sync.Once
}

func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.spoke.Load() {
		c.spoke.Store(true)
	}
	return n, err
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		delete(c.g.conns, c)
		c.g.mu.Unlock()
	})
	return err
}
