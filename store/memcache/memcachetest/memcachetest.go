// Package memcachetest starts real memcached processes for tests, on free
// loopback ports, stopped when the test ends. A server can be killed and
// restarted on the same port for fault tests.
//
// When memcached is not on PATH the helpers skip the test, unless the
// environment sets SLUICE_REQUIRE_REDIS=1 (the variable that makes every
// backend test a requirement in CI), in which case they fail it. There are
// no mocks here: every helper talks to a real server.
package memcachetest

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

// startTimeout bounds how long a server may take to answer.
const startTimeout = 15 * time.Second

// Require reports whether SLUICE_REQUIRE_REDIS asks for the tests to fail
// instead of skipping when memcached is missing.
func Require() bool { return os.Getenv("SLUICE_REQUIRE_REDIS") == "1" }

// Available skips t (or fails it, see Require) when memcached is not on
// PATH.
func Available(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("memcached"); err != nil {
		msg := "memcached not found on PATH (apt-get install memcached); set SLUICE_REQUIRE_REDIS=1 to make this a failure"
		if Require() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// Server is one memcached process. Its methods are safe for concurrent use.
type Server struct {
	// Addr is host:port on the loopback interface; it stays the same across
	// Restart.
	Addr string
	// Port is Addr's port.
	Port int

	// TLS holds the certificates of a server started by StartTLS, else
	// nil.
	TLS *redistest.TLSFiles

	t    testing.TB
	log  string // path of the process's output
	proc proctest.Process
}

// Start starts one memcached (64 MB, TCP only) and returns it once it
// answers. It is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartTLS starts one memcached that speaks TLS only, with certificates
// made for the test (Server.TLS; client certificates optional).
func StartTLS(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, withTLS bool) *Server {
	t.Helper()
	Available(t)
	dir := t.TempDir()
	s := &Server{t: t, log: filepath.Join(dir, "memcached.log")}
	if withTLS {
		s.TLS = redistest.MakeTLS(t, dir)
	}
	var err error
	for range 5 {
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			t.Fatalf("memcachetest: find a free port: %v", lerr)
		}
		s.Port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.launch(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("memcachetest: start memcached: %v\nlog:\n%s", err, s.logTail())
	return nil
}

// launch starts the process and waits until it answers.
func (s *Server) launch() error {
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", "0", "-m", "64", "-t", "2"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	if s.TLS != nil {
		args = append(args, "-Z", "-o", "ssl_chain_cert="+s.TLS.ServerCertFile+",ssl_key="+s.TLS.ServerKeyFile+",ssl_ca_cert="+s.TLS.CAFile)
	}
	cmd := exec.Command("memcached", args...)
	return s.proc.Launch(cmd, s.log, startTimeout,
		func() error { _, err := s.Do("version"); return err })
}

func (s *Server) logTail() string {
	data, _ := os.ReadFile(s.log)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// Kill stops the server at once with SIGKILL and waits for it to exit.
// Killing a stopped server does nothing.
func (s *Server) Kill() { s.proc.Kill() }

// Restart starts a killed server again on the same port, empty. It fails
// the test if the server does not come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for range 50 {
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("memcachetest: restart %s: %v\nlog:\n%s", s.Addr, err, s.logTail())
}

// Do sends one text-protocol command line (such as "get k" or "version")
// on a new connection and returns the reply's lines up to and including
// the one that ends it (END, a status word such as STORED, or VERSION...),
// without their line ends. It is for setting up and inspecting servers in
// tests, not for speed. A storage command carries its data after "\r\n"
// in command ("add k 0 60 1\r\n5").
func (s *Server) Do(command string) ([]string, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	var conn net.Conn
	var err error
	if s.TLS != nil {
		conn, err = tls.DialWithDialer(d, "tcp", s.Addr, s.TLS.ClientConfig())
	} else {
		conn, err = d.Dial("tcp", s.Addr)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s\r\n", command); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return lines, err
		}
		line = strings.TrimSuffix(line, "\r\n")
		lines = append(lines, line)
		if strings.HasPrefix(line, "VALUE ") {
			continue
		}
		if len(lines) >= 2 && strings.HasPrefix(lines[len(lines)-2], "VALUE ") {
			continue // a value's data line
		}
		if strings.HasPrefix(line, "STAT ") {
			continue
		}
		if strings.Contains(line, "ERROR") {
			return lines, fmt.Errorf("memcached: %s", line)
		}
		return lines, nil
	}
}

// Get returns the value stored at key and whether there is one, failing the
// test on an error.
func (s *Server) Get(key string) (string, bool) {
	s.t.Helper()
	lines, err := s.Do("get " + key)
	if err != nil {
		s.t.Fatalf("memcachetest: get %s: %v", key, err)
	}
	if len(lines) == 3 && strings.HasPrefix(lines[0], "VALUE ") {
		return lines[1], true
	}
	return "", false
}
