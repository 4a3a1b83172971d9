package app_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/limits"
)

var limitsReloads = regexp.MustCompile(`sluice_config_reloads_total\{kind="limits",result="success"\} (\d+)`)

// limitsLoads is how many times the key-value limits have loaded.
func (ta *testApp) limitsLoads(t *testing.T) int {
	t.Helper()
	_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	m := limitsReloads.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Files written next to the limits files do not reload them; the limits
// files themselves do, also when they are links updated as Kubernetes
// updates a ConfigMap (its ..data link swapped to a new directory).
func TestLimitsWatchOnlyTheLoadedFiles(t *testing.T) {
	for _, tt := range []struct {
		name   string
		linked bool
	}{{"plain files", false}, {"ConfigMap-style links", true}} {
		t.Run("with "+tt.name+", neighbours are ignored and the files are followed", func(t *testing.T) {
			dir := t.TempDir()
			defaults, overrides := filepath.Join(dir, "defaults.yaml"), filepath.Join(dir, "overrides.yaml")
			if tt.linked {
				v1 := filepath.Join(dir, "..v1")
				if err := os.Mkdir(v1, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(v1, "defaults.yaml"), seedDefaults)
				writeFile(t, filepath.Join(v1, "overrides.yaml"), overridesFile(600))
				for _, l := range [][2]string{{"..v1", "..data"}, {"..data/defaults.yaml", "defaults.yaml"}, {"..data/overrides.yaml", "overrides.yaml"}} {
					if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				writeFile(t, defaults, seedDefaults)
				writeFile(t, overrides, overridesFile(600))
			}
			ta := start(t, nil, func(o *app.Options) { o.LimitsPath, o.OverridesPath = defaults, overrides })
			before := ta.limitsLoads(t)
			for i := range 5 {
				writeFile(t, filepath.Join(dir, "notes-"+strconv.Itoa(i)+".txt"), "not a limits file")
				if err := os.WriteFile(filepath.Join(dir, "scratch"), []byte(strconv.Itoa(i)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(300 * time.Millisecond) // well past the 20ms reload delay
			if got := ta.limitsLoads(t); got != before {
				t.Fatalf("after writing files next to the limits files: got %d limits loads, want %d (no reload)", got, before)
			}
			if tt.linked {
				v2 := filepath.Join(dir, "..v2")
				if err := os.Mkdir(v2, 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(v2, "defaults.yaml"), seedDefaults)
				writeFile(t, filepath.Join(v2, "overrides.yaml"), overridesFile(900))
				tmp := filepath.Join(dir, "..data_tmp")
				if err := os.Symlink("..v2", tmp); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
					t.Fatal(err)
				}
			} else {
				writeFile(t, overrides, overridesFile(900))
			}
			eventually(t, "the changed override", func() bool {
				b, err := ta.Limits().Resolve(limits.NewOrdersPerAccount, "12345678")
				return err == nil && b.Limit.Count == 900
			})
		})
	}
}
