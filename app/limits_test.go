package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/limits"
)

const seedDefaults = `NewRegistrationsPerIPAddress:
  burst: 20
  count: 20
  period: 1s
NewOrdersPerAccount:
  burst: 300
  count: 300
  period: 180m
`

func overridesFile(count int) string {
	return "- NewOrdersPerAccount:\n    burst: 300\n    count: " + strconv.Itoa(count) + "\n    period: 180m\n    ids:\n      - 12345678\n"
}

func TestOverridesReload(t *testing.T) {
	dir := t.TempDir()
	defaults, overrides := filepath.Join(dir, "defaults.yaml"), filepath.Join(dir, "overrides.yaml")
	writeFile(t, defaults, seedDefaults)
	writeFile(t, overrides, overridesFile(600))
	ta := start(t, nil, func(o *app.Options) { o.LimitsPath, o.OverridesPath = defaults, overrides })
	countFor := func() int64 {
		b, err := ta.Limits().Resolve(limits.NewOrdersPerAccount, "12345678")
		if err != nil {
			t.Fatal(err)
		}
		return b.Limit.Count
	}
	if got := countFor(); got != 600 {
		t.Fatalf("loaded: got count %d, want 600", got)
	}
	writeFile(t, overrides, overridesFile(900))
	eventually(t, "the changed override", func() bool { return countFor() == 900 })

	metric := func(want string) func() bool {
		return func() bool {
			_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
			return strings.Contains(body, want)
		}
	}
	// A broken file keeps the running set.
	writeFile(t, overrides, "- NewOrdersPerAccount:\n    burst: 0\n")
	eventually(t, "the failed reload", metric(`sluice_config_last_reload_successful{kind="limits"} 0`))
	if got := countFor(); got != 900 {
		t.Fatalf("after a broken file: got count %d, want the running 900", got)
	}
	// So does an emptied one.
	writeFile(t, overrides, overridesFile(700))
	eventually(t, "the fixed file", func() bool { return countFor() == 700 })
	writeFile(t, overrides, "")
	eventually(t, "the refused empty file", metric(`sluice_config_last_reload_successful{kind="limits"} 0`))
	if got := countFor(); got != 700 {
		t.Fatalf("after an empty file: got count %d, want the running 700", got)
	}
	if err := ta.Reload(); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("Reload with an empty overrides file: got %v, want an error saying so", err)
	}
}

func TestBadLimitsFailStartup(t *testing.T) {
	dir := t.TempDir()
	defaults := filepath.Join(dir, "defaults.yaml")
	if err := os.WriteFile(defaults, []byte("Bogus:\n  burst: 1\n  count: 1\n  period: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := app.Defaults()
	o.LimitsPath = defaults
	_, err := app.New(o, app.Deps{})
	if err == nil || !strings.Contains(err.Error(), "defaults.yaml:1") || !strings.Contains(err.Error(), "Bogus") {
		t.Fatalf("got %v, want an error naming defaults.yaml:1 and Bogus", err)
	}
}

// An override id that can never match, as in Boulder's own files, does not
// stop the server: it is logged as a warning and left out.
func TestUnreachableOverrideIsLoggedAndIgnored(t *testing.T) {
	dir := t.TempDir()
	defaults, overrides := filepath.Join(dir, "defaults.yaml"), filepath.Join(dir, "overrides.yaml")
	writeFile(t, defaults, "CertificatesPerDomain:\n  burst: 50\n  count: 50\n  period: 168h\n")
	writeFile(t, overrides, "- CertificatesPerDomain:\n    burst: 300\n    count: 300\n    period: 168h\n    ids:\n      - le.wtf\n      - ecdsa.le.wtf\n")
	o := app.Defaults()
	o.LimitsPath, o.OverridesPath = defaults, overrides
	var logs strings.Builder
	a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, &logs)})
	if err != nil {
		t.Fatalf("app.New: %v, want the file to load", err)
	}
	t.Cleanup(func() { a.Shutdown(context.Background()) })
	for _, want := range []string{"key-value limits: ignored override", `ecdsa.le.wtf`, "overrides.yaml:7", "ignored=1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs %q: got no %q, want it", logs.String(), want)
		}
	}
	b, err := a.Limits().Resolve(limits.CertificatesPerDomain, "ecdsa.le.wtf")
	if err != nil {
		t.Fatal(err)
	}
	if !b.Override || b.Key != "5:le.wtf" || b.Limit.Count != 300 {
		t.Errorf("Resolve(ecdsa.le.wtf): got key %s override %t count %d, want le.wtf's override 5:le.wtf with 300", b.Key, b.Override, b.Limit.Count)
	}
}
