// Package redistest starts real redis-server processes for tests: a single
// node, a Redis Cluster or a Sentinel set-up, on free loopback ports, in the
// test's temporary directory, stopped when the test ends. Nodes can be
// killed and restarted on the same port for fault tests.
//
// When redis-server is not on PATH the helpers skip the test, unless the
// environment sets SLUICE_REQUIRE_REDIS=1, in which case they fail it. There
// are no mocks here: every helper talks to a real server.
package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 15 * time.Second

// Option configures a server started by StartSingle, StartCluster or
// StartSentinel.
type Option func(*config)

type config struct {
	password string // requirepass, or the ACL user's password
	user     string // ACL user; empty means the default user
	tls      bool
	unix     bool     // also listen on a unix socket
	extra    []string // further redis.conf lines
}

// WithPassword makes the server require AUTH with password (requirepass).
func WithPassword(password string) Option {
	return func(c *config) { c.password = password }
}

// WithUser creates the ACL user name with password and full rights, and
// turns the default user off, so that clients must AUTH name password.
func WithUser(name, password string) Option {
	return func(c *config) { c.user, c.password = name, password }
}

// WithTLS makes the server listen with TLS only, with certificates made for
// the test (see Server.TLS). Client certificates are accepted but optional.
func WithTLS() Option {
	return func(c *config) { c.tls = true }
}

// WithUnixSocket makes the server listen on a unix socket too (see
// Server.Socket), besides its loopback port.
func WithUnixSocket() Option {
	return func(c *config) { c.unix = true }
}

// WithConfig adds redis.conf lines, such as "maxmemory 10mb".
func WithConfig(lines ...string) Option {
	return func(c *config) { c.extra = append(c.extra, lines...) }
}

// Server is one redis-server process. Its methods are safe for concurrent
// use.
type Server struct {
	// Addr is host:port on the loopback interface; it stays the same across
	// Restart.
	Addr string
	// Port is Addr's port.
	Port int
	// Dir is the server's working directory (config, log, cluster state).
	Dir string
	// Username and Password are the credentials clients must use; both are
	// empty when the server has no AUTH.
	Username, Password string
	// TLS holds the certificates when the server was started WithTLS, else
	// nil.
	TLS *TLSFiles
	// Socket is the unix socket's path when the server was started
	// WithUnixSocket, else empty. It lives in a short temporary directory
	// of its own (a socket path is limited to about 100 bytes).
	Socket string

	t    testing.TB
	conf string   // path of redis.conf
	args []string // extra command-line arguments (--sentinel)
	proc proctest.Process

	statsMu   sync.Mutex
	statsConn net.Conn      // Reads' connection, kept open; protected by statsMu
	statsR    *bufio.Reader // reads statsConn
}

// Require reports whether SLUICE_REQUIRE_REDIS asks for the tests to fail
// instead of skipping when redis-server is missing.
func Require() bool { return os.Getenv("SLUICE_REQUIRE_REDIS") == "1" }

// Available skips t (or fails it, see Require) when redis-server or
// redis-cli is not on PATH.
func Available(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			msg := fmt.Sprintf("%s not found on PATH (apt-get install redis-server); set SLUICE_REQUIRE_REDIS=1 to make this a failure", bin)
			if Require() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// StartSingle starts one stand-alone redis-server and returns it once it
// answers PING. It is stopped when the test ends.
func StartSingle(t testing.TB, opts ...Option) *Server {
	t.Helper()
	Available(t)
	var c config
	for _, o := range opts {
		o(&c)
	}
	return start(t, c, "node", nil, false)
}

// start makes a directory, writes a config and starts a server on a free
// port, retrying with another port if the chosen one was taken meanwhile.
func start(t testing.TB, c config, name string, lines func(port int) []string, clusterBus bool) *Server {
	t.Helper()
	return startArgs(t, c, name, lines, clusterBus, nil)
}

func startWithArgs(t testing.TB, c config, name string, lines func(port int) []string, args []string) *Server {
	t.Helper()
	return startArgs(t, c, name, lines, false, args)
}

func startArgs(t testing.TB, c config, name string, lines func(port int) []string, clusterBus bool, args []string) *Server {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), name)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{Dir: dir, t: t, Username: c.user, Password: c.password, args: args}
	if c.tls {
		s.TLS = makeTLS(t, dir)
	}
	if c.unix {
		sockDir, err := os.MkdirTemp("", "redistest")
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(sockDir) })
		s.Socket = filepath.Join(sockDir, "redis.sock")
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t, clusterBus)
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		conf := s.baseConfig(c)
		if lines != nil {
			conf = append(conf, lines(port)...)
		}
		conf = append(conf, c.extra...)
		s.conf = filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(s.conf, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if lastErr = s.launch(); lastErr == nil {
			break
		}
		if !strings.Contains(s.logTail(), "in use") {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("redistest: start redis-server in %s: %v\nlog:\n%s", dir, lastErr, s.logTail())
	}
	t.Cleanup(s.stop)
	return s
}

// baseConfig is the redis.conf every server gets.
func (s *Server) baseConfig(c config) []string {
	lines := []string{
		"bind 127.0.0.1",
		"dir " + s.Dir,
		"logfile " + filepath.Join(s.Dir, "redis.log"),
		`save ""`,
		"appendonly no",
		"protected-mode no",
		"daemonize no",
	}
	if c.tls {
		lines = append(lines,
			"port 0",
			"tls-port "+strconv.Itoa(s.Port),
			"tls-cert-file "+s.TLS.ServerCertFile,
			"tls-key-file "+s.TLS.ServerKeyFile,
			"tls-ca-cert-file "+s.TLS.CAFile,
			"tls-auth-clients optional",
			"tls-cluster yes",
			"tls-replication yes",
		)
	} else {
		lines = append(lines, "port "+strconv.Itoa(s.Port))
	}
	if s.Socket != "" {
		lines = append(lines, "unixsocket "+s.Socket, "unixsocketperm 700")
	}
	switch {
	case c.user != "":
		lines = append(lines,
			"user default off",
			fmt.Sprintf("user %s on >%s ~* &* +@all", c.user, c.password),
		)
	case c.password != "":
		lines = append(lines, "requirepass "+c.password, "masterauth "+c.password)
	}
	return lines
}

// freePort returns a loopback port nobody listens on; with clusterBus, the
// port 10000 above it (Redis Cluster's bus) is free too.
func freePort(t testing.TB, clusterBus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !clusterBus {
			l.Close()
			return port
		}
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("redistest: no free port pair for a cluster node")
	return 0
}

// launch starts the process and waits until it is ready.
func (s *Server) launch() error {
	args := append([]string{s.conf}, s.args...)
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = s.Dir
	return s.proc.Launch(cmd, filepath.Join(s.Dir, "stdout.log"), startTimeout,
		func() error { _, err := s.Do("PING"); return err })
}

// logTail returns the end of the server's log files.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range []string{"redis.log", "stdout.log"} {
		data, _ := os.ReadFile(filepath.Join(s.Dir, name))
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		b.Write(data)
	}
	return b.String()
}

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// for the process to exit. Killing a stopped server does nothing.
func (s *Server) Kill() { s.proc.Kill() }

// Restart starts a killed server again on the same port with the same
// configuration (its data is gone unless the configuration persists it;
// cluster nodes keep their cluster state). It fails the test if the server
// does not come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for range 50 {
		// The port may linger briefly after the kill.
		if err = s.launch(); err == nil {
			return
		}
		if !strings.Contains(s.logTail(), "in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart %s: %v\nlog:\n%s", s.Addr, err, s.logTail())
}

func (s *Server) stop() {
	s.Resume()
	s.Kill()
}

// Pause stops the server process with SIGSTOP: connections stay open but
// nothing answers, as with a hung server or a black-holed network.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) { s.proc.Signal(sig) }

// Do sends one command to the server on a new connection (with TLS and AUTH
// as the server needs) and returns the reply: a string for simple and bulk
// strings, an int64, a []any for arrays, nil for a null reply, or an error
// for an error reply or a connection failure. It is meant for setting up and
// inspecting servers in tests, not for speed.
func (s *Server) Do(args ...string) (any, error) {
	conn, r, err := s.open()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	return roundTrip(conn, r, args)
}

// open connects to the server and authenticates as it needs.
func (s *Server) open() (net.Conn, *bufio.Reader, error) {
	conn, err := s.dial()
	if err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if s.Password != "" {
		auth := []string{"AUTH", s.Password}
		if s.Username != "" {
			auth = []string{"AUTH", s.Username, s.Password}
		}
		if _, err := roundTrip(conn, r, auth); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("auth: %w", err)
		}
	}
	return conn, r, nil
}

// MustDo is Do that fails the test on an error.
func (s *Server) MustDo(args ...string) any {
	s.t.Helper()
	v, err := s.Do(args...)
	if err != nil {
		s.t.Fatalf("redistest: %s %v: %v", s.Addr, args, err)
	}
	return v
}

func (s *Server) dial() (net.Conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	if s.TLS != nil {
		return tls.DialWithDialer(&d, "tcp", s.Addr, s.TLS.ClientConfig())
	}
	return d.Dial("tcp", s.Addr)
}

// ReplyError is an error reply from the server.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

func roundTrip(w io.Writer, r *bufio.Reader, args []string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return nil, err
	}
	return readReply(r)
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, ReplyError(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			// An error inside an array is a value, not a failure.
			v, err := readReply(r)
			var re ReplyError
			if errors.As(err, &re) {
				v, err = re, nil
			}
			if err != nil {
				return nil, err
			}
			arr[i] = v
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// CommandCalls returns how many times the server has run each command since
// it started (or since CONFIG RESETSTAT), from INFO commandstats, keyed by
// lower-case command name ("evalsha", "incrby").
func (s *Server) CommandCalls() map[string]int64 {
	s.t.Helper()
	info, _ := s.MustDo("INFO", "commandstats").(string)
	calls := make(map[string]int64)
	for _, line := range strings.Split(info, "\r\n") {
		// cmdstat_evalsha:calls=3,usec=...
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[name] = n
			}
		}
	}
	return calls
}

// Reads is how many times the server has read from a client connection
// (INFO stats total_reads_processed, Redis 6.2 and later), the INFO call's
// own read included. It asks on a connection of its own that stays open,
// so that no connection's opening or closing counts. A client's pipelined
// commands that reach the server in one write are one read: the
// difference between two Reads, less one for the second INFO, counts round
// trips.
func (s *Server) Reads() int64 {
	s.t.Helper()
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if s.statsConn == nil {
		conn, r, err := s.open()
		if err != nil {
			s.t.Fatalf("redistest: %s: %v", s.Addr, err)
		}
		s.statsConn, s.statsR = conn, r
		s.t.Cleanup(func() { conn.Close() })
	}
	s.statsConn.SetDeadline(time.Now().Add(5 * time.Second))
	v, err := roundTrip(s.statsConn, s.statsR, []string{"INFO", "stats"})
	if err != nil {
		s.t.Fatalf("redistest: %s INFO stats: %v", s.Addr, err)
	}
	info, _ := v.(string)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				s.t.Fatalf("redistest: total_reads_processed %q: %v", v, err)
			}
			return n
		}
	}
	s.t.Fatalf("redistest: INFO stats has no total_reads_processed (Redis older than 6.2?)")
	return 0
}
