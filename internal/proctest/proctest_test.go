package proctest_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
)

func TestLaunch(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	t.Run("a process that becomes ready", func(t *testing.T) {
		cmd := exec.Command("sleep", "5")
		calls := 0
		var exited <-chan struct{}
		err := proctest.Launch(cmd, log, time.Second, func(e <-chan struct{}) { exited = e }, func() error {
			calls++
			if calls < 3 {
				return errors.New("not yet")
			}
			return nil
		})
		if err != nil || calls != 3 || exited == nil {
			t.Fatalf("got %v after %d calls, want ready on the third", err, calls)
		}
		_ = cmd.Process.Kill()
		<-exited
	})
	t.Run("a process that exits first", func(t *testing.T) {
		err := proctest.Launch(exec.Command("true"), log, 5*time.Second, nil, func() error { return errors.New("no") })
		if err == nil || !strings.Contains(err.Error(), "exited") {
			t.Fatalf("got %v, want an error saying it exited", err)
		}
	})
	t.Run("a process never ready is killed at the timeout", func(t *testing.T) {
		err := proctest.Launch(exec.Command("sleep", "30"), log, 100*time.Millisecond, nil, func() error { return errors.New("no") })
		if err == nil || !strings.Contains(err.Error(), "not ready after") {
			t.Fatalf("got %v, want a timeout", err)
		}
	})
}

func TestProcessKillAndSignal(t *testing.T) {
	t.Parallel()
	var p proctest.Process
	p.Kill()               // nothing started: nothing to do
	p.Signal(os.Interrupt) // nor to signal
	cmd := exec.Command("sleep", "30")
	if err := p.Launch(cmd, filepath.Join(t.TempDir(), "log"), time.Second, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGSTOP)
	p.Signal(syscall.SIGCONT)
	began := time.Now()
	p.Kill()
	if cmd.ProcessState == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("after Kill: got state %v, want the process killed and waited for", cmd.ProcessState)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Kill took %s", took)
	}
	p.Kill() // killed already: nothing to do
}
