package app

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchedPaths lists the configuration files and directories to watch.
func (a *App) watchedPaths() []string {
	var paths []string
	for _, p := range []string{a.opts.ConfigPath, a.opts.LimitsPath, a.opts.OverridesPath} {
		if p != "" {
			paths = append(paths, p)
		}
	}
	return paths
}

// watch reloads the configuration when a watched file or directory changes.
// It watches directories, not files, so that editors' rename-and-replace
// saves and Kubernetes ConfigMap updates (a `..data` symlink swapped to a
// new timestamped directory) are seen. Bursts of events within
// ReloadDelay are coalesced into one reload. The returned function stops
// the watcher.
func (a *App) watch() (func(), error) {
	paths := a.watchedPaths()
	if len(paths) == 0 {
		return func() {}, nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return func() {}, err
	}
	dirs := map[string]bool{}
	for _, p := range paths {
		st, err := os.Stat(p)
		switch {
		case err == nil && st.IsDir():
			dirs[p] = true
			_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() && path != p && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				if err == nil && d.IsDir() {
					dirs[path] = true
				}
				return nil
			})
		default:
			dirs[filepath.Dir(p)] = true
		}
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			a.log.Warn("cannot watch directory", "dir", d, "err", err)
		}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-done:
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				a.log.Debug("config change", "file", ev.Name, "op", ev.Op.String())
				if timer == nil {
					timer = time.NewTimer(a.opts.ReloadDelay)
				} else {
					timer.Reset(a.opts.ReloadDelay)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				a.log.Warn("config watcher error", "err", err)
			case <-fire:
				fire = nil
				_ = a.Reload()
			}
		}
	}()
	return func() {
		close(done)
		_ = w.Close()
		<-stopped
	}, nil
}
