package redistest

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// MasterName is the name the sentinels started by StartSentinel monitor.
const MasterName = "sluice-master"

// Sentinel is a master watched by one or more sentinels.
type Sentinel struct {
	// Master is the data node.
	Master *Server
	// Sentinels are the sentinel processes.
	Sentinels []*Server
	// MasterName is the name the sentinels know the master by.
	MasterName string
}

// Addrs returns the sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		addrs[i] = n.Addr
	}
	return addrs
}

// StartSentinel starts a master (configured by opts: password, ACL user)
// and n sentinels (1 to 3) monitoring it under MasterName, and waits until
// every sentinel reports the master's address. The sentinels themselves
// need no AUTH. TLS is not supported here.
func StartSentinel(t testing.TB, n int, opts ...Option) *Sentinel {
	t.Helper()
	Available(t)
	if n < 1 || n > 3 {
		t.Fatalf("redistest: StartSentinel wants 1 to 3 sentinels, got %d", n)
	}
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.tls {
		t.Fatal("redistest: StartSentinel does not support TLS")
	}
	master := start(t, c, "master", nil, false)
	st := &Sentinel{Master: master, MasterName: MasterName}
	quorum := n/2 + 1
	for i := range n {
		lines := func(int) []string {
			l := []string{
				fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", MasterName, master.Port, quorum),
				fmt.Sprintf("sentinel down-after-milliseconds %s 1000", MasterName),
				fmt.Sprintf("sentinel failover-timeout %s 3000", MasterName),
			}
			if c.user != "" {
				l = append(l, fmt.Sprintf("sentinel auth-user %s %s", MasterName, c.user))
			}
			if c.password != "" {
				l = append(l, fmt.Sprintf("sentinel auth-pass %s %s", MasterName, c.password))
			}
			return l
		}
		// The sentinel's own config: no AUTH, no TLS.
		sn := startSentinel(t, fmt.Sprintf("sentinel%d-", i), lines)
		st.Sentinels = append(st.Sentinels, sn)
	}
	want := strconv.Itoa(master.Port)
	deadline := time.Now().Add(20 * time.Second)
	for _, sn := range st.Sentinels {
		for {
			v, err := sn.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
			if arr, ok := v.([]any); err == nil && ok && len(arr) == 2 && arr[1] == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: sentinel %s does not know the master: %v %v", sn.Addr, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return st
}

func startSentinel(t testing.TB, name string, lines func(int) []string) *Server {
	t.Helper()
	// start writes redis.conf and runs redis-server on it; --sentinel turns
	// it into a sentinel, which needs its config file writable.
	return startWithArgs(t, config{}, name, lines, []string{"--sentinel"})
}
