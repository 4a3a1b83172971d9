package descriptors

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Load reads the configuration at path: one file, or every file named
// *.yaml or *.yml in a directory and its subdirectories, in name order.
// Files and directories whose names start with a dot are skipped, so a
// Kubernetes ConfigMap volume (its "..data" link and "..2026_11_21_..."
// directories) loads each file once, through its top-level link, and
// editor or VCS leftovers are ignored. Symbolic links are followed; a file
// reached twice is loaded once. An empty directory gives an empty Config.
//
// Problems in the files are returned together as an ErrorList, each with
// file and line; a file that cannot be read is reported as is. Nothing is
// returned but the error when anything is wrong.
func Load(path string) (*Config, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load descriptors: %w", err)
	}
	files := []string{path}
	if info.IsDir() {
		w := &walker{seen: make(map[string]bool)}
		if err := w.walk(path, 0); err != nil {
			return nil, fmt.Errorf("load descriptors: %w", err)
		}
		files = w.files
	}
	var (
		domains []*Domain
		errs    ErrorList
	)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("load descriptors: %w", err)
		}
		d, err := Parse(f, data)
		if err != nil {
			errs = append(errs, err.(ErrorList)...)
			continue
		}
		domains = append(domains, d)
	}
	c, err := New(domains...)
	if err != nil {
		errs = append(errs, err.(ErrorList)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// maxWalkDepth bounds how deep Load descends into subdirectories.
const maxWalkDepth = 16

// walker collects the configuration files of a directory tree.
type walker struct {
	files []string
	seen  map[string]bool // real paths of the files and directories visited
}

func (w *walker) walk(dir string, depth int) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if w.seen[real] || depth > maxWalkDepth {
		return nil
	}
	w.seen[real] = true
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		full := filepath.Join(dir, name)
		info, err := os.Stat(full) // follows links
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && !isYAML(name) {
				continue // a dangling link to something we would not load
			}
			return err
		}
		if info.IsDir() {
			if err := w.walk(full, depth+1); err != nil {
				return err
			}
			continue
		}
		if !info.Mode().IsRegular() || !isYAML(name) {
			continue
		}
		real, err := filepath.EvalSymlinks(full)
		if err != nil {
			return err
		}
		if !w.seen[real] {
			w.seen[real] = true
			w.files = append(w.files, full)
		}
	}
	return nil
}

func isYAML(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}
