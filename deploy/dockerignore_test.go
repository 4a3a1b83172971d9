package deploy_test

import (
	"bufio"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerIgnore is a .dockerignore: patterns relative to the build
// context, `*` and `?` within a path element, `**` across elements, a
// pattern matching a directory excludes what is under it, and a later
// `!pattern` takes a path back in.
type dockerIgnore []struct {
	re     *regexp.Regexp
	negate bool
}

func readDockerIgnore(t *testing.T, file string) dockerIgnore {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerIgnore
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		neg := strings.HasPrefix(p, "!")
		p = path.Clean(strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/"))
		var re strings.Builder
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString(`(?:.*/)?`)
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(`.*`)
				i++
			case p[i] == '*':
				re.WriteString(`[^/]*`)
			case p[i] == '?':
				re.WriteString(`[^/]`)
			default:
				re.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		d = append(d, struct {
			re     *regexp.Regexp
			negate bool
		}{regexp.MustCompile(`^` + re.String() + `(?:/.*)?$`), neg})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// excludes reports whether the context path name (slash-separated,
// relative) is left out of the build context.
func (d dockerIgnore) excludes(name string) bool {
	out := false
	for _, p := range d {
		if p.re.MatchString(name) {
			out = !p.negate
		}
	}
	return out
}

var embedLine = regexp.MustCompile(`(?m)^//go:embed (.+)$`)

// TestDockerIgnoreKeepsTheBuildInputs checks that .dockerignore leaves in
// everything `go build ./cmd/sluice` reads — go.mod, go.sum, every
// non-test Go file and every file a //go:embed names — and leaves out the
// repository's history and local binaries.
func TestDockerIgnoreKeepsTheBuildInputs(t *testing.T) {
	d := readDockerIgnore(t, "../.dockerignore")
	need := []string{"go.mod", "go.sum"}
	err := filepath.WalkDir("..", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, ".."+string(filepath.Separator)))
		if e.IsDir() {
			if rel == ".git" || rel == "bin" {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		need = append(need, rel)
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range embedLine.FindAllStringSubmatch(string(src), -1) {
			for _, pat := range strings.Fields(m[1]) {
				matches, _ := filepath.Glob(filepath.Join(filepath.Dir(p), strings.TrimPrefix(strings.Trim(pat, `"`), "all:")))
				for _, f := range matches {
					need = append(need, filepath.ToSlash(strings.TrimPrefix(f, ".."+string(filepath.Separator))))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range need {
		if d.excludes(f) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", f)
		}
	}
	for _, f := range []string{".git/HEAD", "bin/sluice", "sluice"} {
		if !d.excludes(f) {
			t.Errorf(".dockerignore: got %s sent to the builder, want it left out", f)
		}
	}
	// The matcher itself.
	for name, want := range map[string]bool{"x/testdata/fuzz/F/1": true, "testdata/fuzz/F": true, "cmd/sluice/main.go": false, "a.test": true, "cmd/a.test": false} {
		if got := d.excludes(name); got != want {
			t.Errorf("excludes(%q): got %v, want %v", name, got, want)
		}
	}
}
