package memcachetest

import (
	"context"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is a small authoritative DNS server on a free loopback UDP port that
// answers every SRV question with the records set by SetSRV, so that tests
// can exercise SRV discovery without the machine's resolver. It is stopped
// when the test ends.
type DNS struct {
	// Addr is host:port of the UDP socket.
	Addr string

	pc   net.PacketConn
	mu   sync.Mutex
	srvs []net.SRV // protected by mu; nil answers NXDOMAIN
}

// StartDNS starts a DNS server with no records.
func StartDNS(t testing.TB) *DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("memcachetest: listen for DNS: %v", err)
	}
	d := &DNS{Addr: pc.LocalAddr().String(), pc: pc}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.serve()
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return d
}

// SetSRV sets the SRV records every SRV question is answered with; none
// makes the server answer NXDOMAIN.
func (d *DNS) SetSRV(srvs ...net.SRV) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.srvs = srvs
}

// SRVFor returns an SRV record naming s: target localhost (an SRV target
// must be a name, which the machine's hosts file resolves), s's port.
func SRVFor(s *Server) net.SRV {
	return net.SRV{Target: "localhost.", Port: uint16(s.Port), Priority: 1, Weight: 1}
}

// Resolver returns a resolver that asks only this server.
func (d *DNS) Resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "udp", d.Addr)
		},
	}
}

func (d *DNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if reply, err := d.answer(buf[:n]); err == nil {
			d.pc.WriteTo(reply, from)
		}
	}
}

// answer builds the reply to one query.
func (d *DNS) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	srvs := d.srvs
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if len(srvs) == 0 {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if q.Type == dnsmessage.TypeSRV {
		for _, s := range srvs {
			target, err := dnsmessage.NewName(s.Target)
			if err != nil {
				return nil, err
			}
			err = b.SRVResource(
				dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeSRV, Class: dnsmessage.ClassINET},
				dnsmessage.SRVResource{Priority: s.Priority, Weight: s.Weight, Port: s.Port, Target: target},
			)
			if err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}
