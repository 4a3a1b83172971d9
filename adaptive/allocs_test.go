package adaptive

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-rl/sluice/clock"
)

// TestMiddlewareAllocations checks that an admitted request costs the
// middleware one allocation, its response writer and the admission
// together, around a handler that allocates nothing.
func TestMiddlewareAllocations(t *testing.T) {
	l, err := New(benchConfig(), Options{Clock: clock.New()})
	if err != nil {
		t.Fatal(err)
	}
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	r := httptest.NewRequest(http.MethodGet, "/users/42", nil)
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, r) // the route's first request makes its entry
	if allocs := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, r) }); allocs > 1 {
		t.Errorf("%v allocations a request, want 1", allocs)
	}
}
