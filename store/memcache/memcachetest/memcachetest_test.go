package memcachetest_test

import (
	"testing"

	"github.com/sluice-rl/sluice/store/memcache/memcachetest"
)

func TestServer(t *testing.T) {
	s := memcachetest.Start(t)
	steps := []struct {
		name      string
		command   string
		wantReply string
		wantErr   bool
	}{
		{name: "a missing counter cannot be incremented", command: "incr k 1", wantReply: "NOT_FOUND"},
		{name: "a value is added", command: "add k 0 60 1\r\n5", wantReply: "STORED"},
		{name: "the value is incremented", command: "incr k 2", wantReply: "7"},
		{name: "an unknown command is an error", command: "nonsense", wantErr: true},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			lines, err := s.Do(st.command)
			if st.wantErr {
				if err == nil {
					t.Fatalf("got %v, want an error", lines)
				}
				return
			}
			if err != nil || len(lines) != 1 || lines[0] != st.wantReply {
				t.Fatalf("got %q (error %v), want %q", lines, err, st.wantReply)
			}
		})
	}
	if got, ok := s.Get("k"); !ok || got != "7" {
		t.Fatalf("Get: got %q (found %v), want \"7\"", got, ok)
	}
	t.Run("a killed server does not answer and a restarted one is empty", func(t *testing.T) {
		s.Kill()
		if _, err := s.Do("version"); err == nil {
			t.Fatal("a killed server answered")
		}
		s.Restart()
		if _, ok := s.Get("k"); ok {
			t.Fatal("got a value after the restart, want none")
		}
	})
}
