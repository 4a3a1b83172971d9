package proctest_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
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
