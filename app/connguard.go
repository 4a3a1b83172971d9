package app

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// connGuard wraps a listener: it caps the open connections (max > 0: a
// connection past the cap waits in the kernel's accept queue until one
// closes, as with x/net's netutil.LimitListener) and remembers the open
// ones, so that shutdown can close at once those that have sent nothing
// yet. Neither net/http (which waits 5 s for such a connection) nor
// grpc-go (whose Stop and GracefulStop wait for a connection's handshake,
// up to its connection timeout) would otherwise let go of them. Its
// connections keep the accepted connection's CloseWrite, which
// netutil.LimitListener's hide: the servers' lingering close needs it.
type connGuard struct {
	net.Listener
	slots  chan struct{} // a token per open connection; nil: no cap
	done   chan struct{} // closed with the listener: Accept waits no more
	mu     sync.Mutex
	conns  map[*guardedConn]struct{}
	closed bool
}

func guardListener(ln net.Listener, max int) *connGuard {
	g := &connGuard{Listener: ln, done: make(chan struct{}), conns: map[*guardedConn]struct{}{}}
	if max > 0 {
		g.slots = make(chan struct{}, max)
	}
	return g
}

// open returns the connections open.
func (g *connGuard) open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// acquire waits for a free slot and reports whether it took one (false
// once the listener is closed).
func (g *connGuard) acquire() bool {
	if g.slots == nil {
		return false
	}
	select {
	case g.slots <- struct{}{}:
		return true
	case <-g.done:
		return false
	}
}

func (g *connGuard) release() { <-g.slots }

func (g *connGuard) Accept() (net.Conn, error) {
	acquired := g.acquire()
	c, err := g.Listener.Accept()
	if err != nil {
		if acquired {
			g.release()
		}
		return nil, err
	}
	gc := &guardedConn{Conn: c, g: g, slot: acquired}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		_ = gc.Close() // and its slot
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
	close(g.done)
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
// and leaves its guard's set, and its slot, when closed.
type guardedConn struct {
	net.Conn
	g     *connGuard
	slot  bool // it holds one of g.slots
	spoke atomic.Bool
	once  sync.Once
}

// errNoCloseWrite: the accepted connection cannot shut its writing side
// alone.
var errNoCloseWrite = errors.New("the connection cannot close its writing side alone")

// CloseWrite shuts the connection's writing side (a TCP connection's
// sends its FIN) and leaves it open for reading: net/http and h2grpc
// close a connection that way, then read what the client still sends,
// so that the kernel does not reset the connection over unread bytes and
// throw away the last answer.
func (c *guardedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoCloseWrite
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
		if c.slot {
			c.g.release()
		}
	})
	return err
}
