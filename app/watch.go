package app

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluice-rl/sluice/descriptors"
)

// descriptorPath is the descriptor config file or directory: --config, or
// in envoyproxy/ratelimit's goruntime layout (--runtime-root set)
// root/subdirectory/appdirectory. Empty: no descriptor config.
func (o *Options) descriptorPath() string {
	if o.RuntimeRoot == "" {
		return o.ConfigPath
	}
	return filepath.Join(o.RuntimeRoot, o.RuntimeSubdirectory, o.RuntimeAppDirectory)
}

// descriptorLoadOptions says how the descriptor config loads: merging
// domains when asked, and with dotfiles in the goruntime layout unless
// --runtime-ignore-dotfiles (goruntime reads them; --config never did).
func (o *Options) descriptorLoadOptions() descriptors.LoadOptions {
	return descriptors.LoadOptions{
		MergeDomains: o.MergeDomainConfig,
		DotFiles:     o.RuntimeRoot != "" && !o.RuntimeIgnoreDotfiles,
	}
}

// watchedDirs lists the directories to watch. A directory mapped to a
// non-nil set only matters for events on those paths: it is watched for a
// link (or directory) in it being replaced, such as a swapped
// --runtime-root symlink. A nil set takes every event.
func (a *App) watchedDirs() map[string]map[string]bool {
	dirs := map[string]map[string]bool{}
	anchor := func(p string) {
		p = filepath.Clean(p)
		dir := filepath.Dir(p)
		if names, ok := dirs[dir]; ok && names == nil {
			return // already watched for everything
		}
		if dirs[dir] == nil {
			dirs[dir] = map[string]bool{}
		}
		dirs[dir][p] = true
	}
	whole := func(p string, dots bool) {
		p = filepath.Clean(p)
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
			dirs[filepath.Dir(p)] = nil
			return
		}
		_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if path != p && !dots && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			dirs[path] = nil
			return nil
		})
	}
	o := &a.opts
	if p := o.descriptorPath(); p != "" {
		whole(p, o.descriptorLoadOptions().DotFiles)
		switch {
		case o.RuntimeRoot != "" && o.RuntimeWatchRoot:
			anchor(o.RuntimeRoot)
		case o.RuntimeRoot == "":
			if st, err := os.Lstat(p); err == nil && st.Mode()&os.ModeSymlink != 0 {
				anchor(p) // --config is itself a link that may be swapped
			}
		}
	}
	for _, p := range []string{o.LimitsPath, o.OverridesPath} {
		if p != "" {
			limitsFile(p, anchor, whole)
		}
	}
	return dirs
}

// limitsFile watches a key-value limits file, not the files next to it: its
// directory is watched for events on the file alone. A file that is a
// symlink is also watched where it leads, and for the link's first step
// when that is a name in the same directory: a Kubernetes ConfigMap's
// limits.yaml → ..data/limits.yaml is updated by swapping ..data. A path
// that is a directory is watched whole.
func limitsFile(p string, anchor func(string), whole func(string, bool)) {
	p = filepath.Clean(p)
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		whole(p, false)
		return
	}
	anchor(p)
	target, err := os.Readlink(p)
	if err != nil {
		return // not a link (or not there yet)
	}
	if !filepath.IsAbs(target) {
		if first, _, _ := strings.Cut(filepath.ToSlash(target), "/"); first != "" && first != "." && first != ".." {
			anchor(filepath.Join(filepath.Dir(p), first))
		}
	}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
		anchor(real)
	}
}

// watcher keeps an fsnotify watcher on the directories watchedDirs lists.
// It is used by one goroutine at a time.
type watcher struct {
	a       *App
	w       *fsnotify.Watcher
	real    map[string]string          // watched directory → its real path when added
	filters map[string]map[string]bool // watched directory → the paths that matter, nil for all
}

// update brings the watches in line with the directories the configuration
// now spans: after a symlink swap the same path names a new directory, which
// must be watched afresh.
func (w *watcher) update() {
	want := w.a.watchedDirs()
	for dir := range w.real {
		if _, ok := want[dir]; !ok {
			_ = w.w.Remove(dir)
			delete(w.real, dir)
		}
	}
	for dir := range want {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue // not there (yet); a later change brings it in
		}
		if prev, ok := w.real[dir]; ok {
			if prev == real {
				continue
			}
			_ = w.w.Remove(dir) // the old directory may be gone already
		}
		if err := w.w.Add(dir); err != nil {
			w.a.log.Warn("cannot watch directory", "dir", dir, "err", err)
			delete(w.real, dir)
			continue
		}
		w.real[dir] = real
	}
	w.filters = want
}

// matters reports whether an event on path should trigger a reload.
func (w *watcher) matters(path string) bool {
	path = filepath.Clean(path)
	names, ok := w.filters[filepath.Dir(path)]
	if !ok || names == nil {
		return true // a watched tree, or a path we did not expect: reload to be safe
	}
	return names[path]
}

// watch reloads the configuration when a watched file or directory changes.
// It watches directories, not files, so that editors' rename-and-replace
// saves and Kubernetes ConfigMap updates (a `..data` symlink swapped to a
// new timestamped directory) are seen; in the goruntime layout it also
// watches the directory holding --runtime-root, so that swapping that
// symlink to a new directory reloads (unless --runtime-watch-root=false).
// After each reload, SIGHUP's included, the watches follow the paths to
// their current directories. Bursts of events within ReloadDelay are coalesced into one
// reload. The returned function stops the watcher.
func (a *App) watch() (func(), error) {
	if len(a.watchedDirs()) == 0 {
		return func() {}, nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return func() {}, err
	}
	w := &watcher{a: a, w: fw, real: map[string]string{}}
	w.update()
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
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				if !w.matters(ev.Name) {
					continue
				}
				a.log.Debug("config change", "file", ev.Name, "op", ev.Op.String())
				if timer == nil {
					timer = time.NewTimer(a.opts.ReloadDelay)
				} else {
					timer.Reset(a.opts.ReloadDelay)
				}
				fire = timer.C
			case err, ok := <-fw.Errors:
				if !ok {
					return
				}
				a.log.Warn("config watcher error", "err", err)
			case <-fire:
				fire = nil
				w.update()
				_ = a.Reload()
			case <-a.reloaded: // any reload, SIGHUP's included
				w.update()
			}
		}
	}()
	// Stopping twice (a second Shutdown) is harmless.
	return sync.OnceFunc(func() {
		close(done)
		_ = fw.Close()
		<-stopped
	}), nil
}
