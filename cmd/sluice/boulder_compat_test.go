package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every limits file Boulder ships loads: the defaults and overrides of its
// integration tests (test/config-next) and the working_* files of its
// ratelimits package tests, in every version kept in
// shared/compat-data/boulder. Override ids Boulder accepts but never counts
// under (such as "ecdsa.le.wtf" for CertificatesPerDomain) are warnings;
// --strict makes them errors. Boulder's busted_* files stay refused.
func TestCheckLoadsBoulderFiles(t *testing.T) {
	root := compatData(t, "boulder")
	files, err := filepath.Glob(filepath.Join(root, "*", "*", "*", "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var working, busted, warned int
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		base := filepath.Base(f)
		flag := ""
		switch {
		case strings.Contains(base, "defaults") || strings.HasPrefix(base, "working_default"):
			flag = "--limits"
		case strings.Contains(base, "override"):
			flag = "--overrides"
		default:
			continue
		}
		wantOK := !strings.HasPrefix(base, "busted_")
		t.Run(rel, func(t *testing.T) {
			code, _, errOut := runCmd("check", flag, f)
			if got := code == 0; got != wantOK {
				t.Fatalf("sluice check %s: exit %d (%s), want accepted = %t", flag, code, strings.TrimSpace(errOut), wantOK)
			}
			if !wantOK {
				busted++
				return
			}
			working++
			if !strings.Contains(errOut, "warning:") {
				return
			}
			warned++
			if !strings.Contains(errOut, "can never match") || !strings.Contains(errOut, "(ignored)") {
				t.Errorf("warning %q: want it to say the id can never match and is ignored", errOut)
			}
			code, _, strictErr := runCmd("check", "--strict", flag, f)
			if code != 1 || strings.Contains(strictErr, "warning:") || !strings.Contains(strictErr, "can never match") {
				t.Errorf("sluice check --strict: exit %d (%s), want 1 with the warnings as errors", code, strictErr)
			}
		})
	}
	if working < 20 || busted < 10 {
		t.Errorf("checked %d working and %d busted files, want at least 20 and 10: did the layout of compat-data/boulder change?", working, busted)
	}
	if warned == 0 {
		t.Error("no file gave a warning, want the ones with ecdsa.le.wtf to")
	}
}

// The integration-test overrides at Boulder's head name the ids the
// warnings are about, with the id that would apply.
func TestCheckNamesTheIDABoulderOverrideNeeds(t *testing.T) {
	root := compatData(t, "boulder")
	dir := filepath.Join(root, "head", "test", "config-next")
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd("check",
		"--limits", filepath.Join(dir, "ratelimit-defaults.yml"),
		"--overrides", filepath.Join(dir, "ratelimit-overrides.yml"))
	if code != 0 {
		t.Fatalf("exit %d: %s, want 0", code, errOut)
	}
	if !strings.Contains(out, ": ok") {
		t.Errorf("stdout %q: want ok", out)
	}
	for _, want := range []string{
		`ratelimit-overrides.yml:32: override id "ecdsa.le.wtf" for CertificatesPerDomain can never match`,
		`ratelimit-overrides.yml:34: override id "must-staple.le.wtf" for CertificatesPerDomain can never match`,
		`counted under "le.wtf" (bucket key 5:le.wtf); write "le.wtf" to apply it`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q: got no %q, want it", errOut, want)
		}
	}
}
