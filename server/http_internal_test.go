package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The bytes of bodies being read past their first freeBodyBytes are
// bounded for every request together: a large body that finds no room is
// refused (503), a small one is still read, and a body read gives its
// room back.
func TestLargeBodiesShareABoundedRoom(t *testing.T) {
	read := func(n int) ([]byte, error) {
		r := httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(strings.Repeat(" ", n-2)+"{}"))
		return readBody(httptest.NewRecorder(), r)
	}
	before := pendingBodies.Load()
	if _, err := read(900 << 10); err != nil {
		t.Fatalf("a 900 KiB body with room: got %v, want it read", err)
	}
	if got := pendingBodies.Load(); got != before {
		t.Fatalf("after a body was read: %d bytes still taken, want %d", got, before)
	}

	pendingBodies.Add(MaxPendingBodyBytes) // as if other bodies held all the room
	defer pendingBodies.Add(-MaxPendingBodyBytes)
	_, refusedBefore := BodyRoom()
	_, err := read(20 << 10)
	if !errors.Is(err, errBodyBusy) || bodyStatus(err) != http.StatusServiceUnavailable {
		t.Errorf("a 20 KiB body without room: got %v (status %d), want errBodyBusy and 503", err, bodyStatus(err))
	}
	if _, refused := BodyRoom(); refused != refusedBefore+1 {
		t.Errorf("BodyRoom's refused: %d, want %d", refused, refusedBefore+1)
	}
	if _, err := read(freeBodyBytes); err != nil {
		t.Errorf("a body of freeBodyBytes without room: got %v, want it read", err)
	}
	if got := pendingBodies.Load(); got != before+MaxPendingBodyBytes {
		t.Errorf("after a refused body: %d bytes taken, want %d", got, before+MaxPendingBodyBytes)
	}
}
