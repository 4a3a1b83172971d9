package redistest_test

import (
	"testing"

	"github.com/sluice-rl/sluice/store/redis/redistest"
)

func TestStartSingle(t *testing.T) {
	t.Parallel()
	s := redistest.StartSingle(t)
	if v := s.MustDo("SET", "a", "1"); v != "OK" {
		t.Fatalf("got %v, want OK", v)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING after Kill: got no error")
	}
	s.Restart()
	if v := s.MustDo("PING"); v != "PONG" {
		t.Fatalf("got %v, want PONG", v)
	}
}

func TestStartSingleWithAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  redistest.Option
	}{
		{"requirepass", redistest.WithPassword("s3cret")},
		{"ACL user", redistest.WithUser("sluice", "s3cret")},
		{"TLS", redistest.WithTLS()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartSingle(t, tc.opt)
			if v := s.MustDo("PING"); v != "PONG" {
				t.Fatalf("got %v, want PONG", v)
			}
		})
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	n := c.NodeFor(t, "hello")
	if v := n.MustDo("SET", "hello", "1"); v != "OK" {
		t.Fatalf("got %v, want OK", v)
	}
}

func TestStartSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 2, redistest.WithPassword("pw"))
	if len(s.Addrs()) != 2 {
		t.Fatalf("got %d sentinels", len(s.Addrs()))
	}
}
