// Package proctest starts the server processes that integration tests run
// against (redis-server, memcached): the process with its output appended
// to a log file, then a wait until it answers. It is test support, for
// the redistest and memcachetest packages.
package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Process is a server process a test started, which any goroutine may kill
// or signal. The zero value holds none.
type Process struct {
	mu     sync.Mutex
	cmd    *exec.Cmd       // nil while stopped
	exited <-chan struct{} // closed when cmd has exited
}

// Launch starts cmd as the package's Launch does and holds it.
func (p *Process) Launch(cmd *exec.Cmd, logPath string, timeout time.Duration, ready func() error) error {
	return Launch(cmd, logPath, timeout, func(exited <-chan struct{}) {
		p.mu.Lock()
		p.cmd, p.exited = cmd, exited
		p.mu.Unlock()
	}, ready)
}

// Kill stops the process at once with SIGKILL, as a crash would, and waits
// for it to exit. Killing a stopped process does nothing.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Signal sends sig to the process, if it runs.
func (p *Process) Signal(sig os.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Launch starts cmd with its standard output and error appended to
// logPath, hands started the channel closed when the process exits (so
// that the caller can record it before waiting), and calls ready every
// 20ms until it returns nil. It fails when the process exits first, or
// when ready still fails after timeout, in which case it kills the
// process.
func Launch(cmd *exec.Cmd, logPath string, timeout time.Duration, started func(exited <-chan struct{}), ready func() error) error {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(exited)
	}()
	if started != nil {
		started(exited)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited: %v", cmd.Path, err)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("not ready after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
