package app

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sluice-rl/sluice/limits"
)

// Limits returns the key-value limits in force: the files' (nil when none
// are configured) with the overrides set at runtime over them.
func (a *App) Limits() *limits.Set {
	if a.overrides == nil {
		return a.limits.Load()
	}
	return a.overrides.Limits()
}

// loadLimits (re)loads the key-value defaults and overrides files and swaps
// the new set in when valid. A file that is empty while the running set has
// entries from it is refused: an emptied file is far more often a botched
// deploy than a decision to drop every limit.
func (a *App) loadLimits() error {
	if a.opts.LimitsPath == "" {
		return nil
	}
	fail := func(err error) error {
		a.reloads.WithLabelValues("limits", "failure").Inc()
		a.lastReload.WithLabelValues("limits").Set(0)
		return err
	}
	for _, p := range []string{a.opts.LimitsPath, a.opts.OverridesPath} {
		if p == "" {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return fail(fmt.Errorf("load limits: %w", err))
		}
		if strings.TrimSpace(string(data)) == "" && a.limits.Load() != nil {
			return fail(fmt.Errorf("load limits: %s is empty; keeping the running limits", p))
		}
	}
	set, err := limits.Load(a.opts.LimitsPath, a.opts.OverridesPath)
	if err != nil {
		return fail(fmt.Errorf("load limits: %w", err))
	}
	if old := a.limits.Load(); old != nil {
		od, oo := old.Len()
		nd, no := set.Len()
		if nd == 0 && od > 0 || no == 0 && oo > 0 {
			return fail(errors.New("load limits: the new files hold no defaults or no overrides where the running set has some; keeping the running limits"))
		}
	}
	a.limits.Store(set)
	a.reloads.WithLabelValues("limits", "success").Inc()
	a.lastReload.WithLabelValues("limits").Set(1)
	nd, no := set.Len()
	a.limitsLoaded.WithLabelValues("default").Set(float64(nd))
	a.limitsLoaded.WithLabelValues("override").Set(float64(no))
	for _, w := range set.Warnings() {
		a.log.Warn("key-value limits: ignored override", "problem", w.Error())
	}
	a.log.Info("key-value limits loaded", "defaults", nd, "overrides", no, "ignored", len(set.Warnings()))
	return nil
}
