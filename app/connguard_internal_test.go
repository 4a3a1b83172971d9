package app

import (
	"net"
	"testing"
	"time"
)

// The guard's cap: past max open connections, Accept waits for one to
// close; closing the listener ends that wait; a connection keeps its
// CloseWrite.
func TestConnGuardCapsWaitsAndCloses(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := guardListener(raw, 1)
	defer g.Close()
	for range 2 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, err := g.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := first.(interface{ CloseWrite() error }); !ok {
		t.Error("an accepted connection has no CloseWrite")
	} else if err := first.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Errorf("CloseWrite: %v", err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := g.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted past the cap of 1")
	case <-time.After(100 * time.Millisecond):
	}
	if got := g.open(); got != 1 {
		t.Errorf("open: %d, want 1", got)
	}
	first.Close()
	first.Close() // a second Close gives back nothing more
	select {
	case c, ok := <-accepted:
		if !ok {
			t.Fatal("Accept failed once the first connection closed")
		}
		defer c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted once the first closed")
	}
	// At the cap again: closing the listener ends Accept's wait.
	done := make(chan error, 1)
	go func() { _, err := g.Accept(); done <- err }()
	time.Sleep(50 * time.Millisecond)
	g.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Accept on a closed listener: got a connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waiting 5 s after the listener closed")
	}
}
