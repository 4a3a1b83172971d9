package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters only (no replicas), every slot
// assigned.
type Cluster struct {
	// Nodes are the masters, in the order their slot ranges were assigned.
	Nodes []*Server
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// NodeFor returns the node that serves key's hash slot, as the cluster sees
// it now.
func (c *Cluster) NodeFor(t testing.TB, key string) *Server {
	t.Helper()
	slot, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	ranges, err := c.Nodes[0].Do("CLUSTER", "SLOTS")
	if err != nil {
		t.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	for _, r := range ranges.([]any) {
		r := r.([]any)
		lo, hi := r[0].(int64), r[1].(int64)
		if slot.(int64) < lo || slot.(int64) > hi {
			continue
		}
		port := r[2].([]any)[1].(int64)
		for _, n := range c.Nodes {
			if int64(n.Port) == port {
				return n
			}
		}
	}
	t.Fatalf("redistest: no node serves %q (slot %v)", key, slot)
	return nil
}

// StartCluster starts masters cluster-enabled redis-server processes (at
// least 3), joins them with redis-cli --cluster create, and waits until
// every node reports cluster_state:ok with all 16384 slots assigned. The
// nodes are stopped when the test ends.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	Available(t)
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", masters)
	}
	var c config
	for _, o := range opts {
		o(&c)
	}
	cl := &Cluster{}
	for i := range masters {
		n := start(t, c, fmt.Sprintf("cluster%d-", i), func(int) []string {
			return []string{
				"cluster-enabled yes",
				"cluster-config-file nodes.conf",
				"cluster-node-timeout 2000",
				"cluster-require-full-coverage yes",
			}
		}, true)
		cl.Nodes = append(cl.Nodes, n)
	}
	args := []string{"--cluster", "create"}
	args = append(args, cl.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	args = append(args, cliAuth(cl.Nodes[0])...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	cl.WaitOK(t)
	return cl
}

// cliAuth returns redis-cli's flags for s's TLS and AUTH.
func cliAuth(s *Server) []string {
	var args []string
	if s.TLS != nil {
		args = append(args, "--tls", "--cacert", s.TLS.CAFile,
			"--cert", s.TLS.ClientCertFile, "--key", s.TLS.ClientKeyFile)
	}
	if s.Username != "" {
		args = append(args, "--user", s.Username)
	}
	if s.Password != "" {
		args = append(args, "--pass", s.Password, "--no-auth-warning")
	}
	return args
}

// WaitOK waits up to 30 seconds until every node says cluster_state:ok,
// knows every other node and sees all slots assigned.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var bad string
		for _, n := range c.Nodes {
			v, err := n.Do("CLUSTER", "INFO")
			if err != nil {
				bad = fmt.Sprintf("%s: %v", n.Addr, err)
				break
			}
			info, _ := v.(string)
			if !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_slots_ok:16384") ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))+"\r\n") {
				bad = fmt.Sprintf("%s: %s", n.Addr, info)
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ok after 30s: %s", bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
