package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limits"
)

// limitsCmd runs "sluice limits show": which limit applies to an id, for
// every name whose id format accepts it (or for one name), and where in the
// files it comes from. Exit 0 when some name accepts the id, 1 when none
// does or the files do not load, 2 for bad usage.
func limitsCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "show" {
		fmt.Fprintln(stderr, "usage: sluice limits show [--limits FILE] [--overrides FILE] [--server ADDR [--admin-token-file FILE]] [--name NAME] ID")
		return 2
	}
	fs := flag.NewFlagSet("sluice limits show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limitsPath := fs.String("limits", os.Getenv("SLUICE_LIMITS"), "key-value limits defaults file (SLUICE_LIMITS)")
	overrides := fs.String("overrides", os.Getenv("SLUICE_OVERRIDES"), "key-value limits overrides file (SLUICE_OVERRIDES)")
	name := fs.String("name", "", "show only this limit name")
	server := fs.String("server", "", "also apply the runtime overrides of the service serving the key-value HTTP API at this address (host:port or URL), read with GET /v1/overrides")
	tokenFile := fs.String("admin-token-file", "", "file holding the administrator's bearer token for --server (its --kv-admin-token-file)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *tokenFile != "" && *server == "" {
		fmt.Fprintln(stderr, "sluice limits show: --admin-token-file is the token for --server, which is not set")
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "sluice limits show: want exactly one id, as a caller would give it (an address, an account id, a domain, regId:domain, ...)")
		return 2
	}
	id := fs.Arg(0)
	set, err := limits.Load(*limitsPath, *overrides)
	if err != nil {
		for _, line := range errorLines(err) {
			fmt.Fprintln(stderr, line)
		}
		return 1
	}
	for _, w := range set.Warnings() {
		fmt.Fprintf(stderr, "warning: %s (ignored)\n", w)
	}
	if *server != "" {
		rt, err := fetchRuntime(*server, *tokenFile, set)
		if err != nil {
			fmt.Fprintf(stderr, "sluice limits show: %v\n", err)
			return 1
		}
		set = set.WithRuntime(rt)
	}
	names := set.Names()
	if *name != "" {
		n, err := limits.ParseName(*name)
		if err != nil {
			fmt.Fprintf(stderr, "sluice limits show: %v\n", err)
			return 1
		}
		names = []limits.Name{n}
	}
	shown := 0
	for _, n := range names {
		b, err := set.Resolve(n.Text, id)
		if err != nil {
			if *name != "" {
				fmt.Fprintf(stderr, "sluice limits show: %v\n", err)
				return 1
			}
			continue // the id is not in this name's format
		}
		shown++
		fmt.Fprintf(stdout, "%s: bucket %s: %s\n", n.Text, b.Key, describeBucket(set, n, b))
	}
	if shown == 0 {
		fmt.Fprintf(stderr, "sluice limits show: no limit name takes id %q\n", id)
		return 1
	}
	return 0
}

// describeBucket says which limit applies to b and where it is written.
func describeBucket(set *limits.Set, n limits.Name, b limits.Bucket) string {
	if !b.Enabled {
		return "not limited (no override, no default)"
	}
	lim := fmt.Sprintf("burst %d, count %d per %s", b.Limit.Burst, b.Limit.Count, b.Limit.Period)
	if !b.Override {
		file, line, _ := set.DefaultAt(n.Text)
		return fmt.Sprintf("%s (default, %s:%d)", lim, file, line)
	}
	o, _ := set.Override(b.OverrideKey)
	at := fmt.Sprintf("%s:%d", o.File, o.Line)
	if o.Runtime {
		at = "runtime override"
		if !o.Updated.IsZero() {
			at += ", set " + o.Updated.UTC().Format(time.RFC3339)
		}
	}
	where := fmt.Sprintf("override %q, %s", o.ID, at)
	if b.OverrideKey != b.Key {
		where = fmt.Sprintf("override for the whole account %q, %s", o.ID, at)
	}
	if o.Comment != "" {
		where += fmt.Sprintf(", %q", o.Comment)
	}
	if d, ok := set.Default(n.Text); ok {
		where += fmt.Sprintf("; the default would be burst %d, count %d per %s", d.Burst, d.Count, d.Period)
	}
	return fmt.Sprintf("%s (%s)", lim, where)
}

// fetchRuntime reads the runtime overrides of the service whose key-value
// HTTP API is at addr (GET /v1/overrides, with the bearer token in
// tokenFile when set), each checked as the service checks it, by bucket
// key.
func fetchRuntime(addr, tokenFile string, set *limits.Set) (map[string]limits.Override, error) {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimSuffix(url, "/") + "/v1/overrides"
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--server %q: %w", addr, err)
	}
	if tokenFile != "" {
		tok, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("runtime overrides: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("runtime overrides from %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		answer := strings.TrimSpace(string(body))
		if len(answer) > 1<<10 { // not a Sluice error: quote its start
			answer = answer[:1<<10] + "..."
		}
		return nil, fmt.Errorf("runtime overrides from %s: %s: %s", url, resp.Status, answer)
	}
	var doc struct {
		Overrides []struct {
			Name, ID, Period, Comment, Updated string
			Burst, Count                       int64
		}
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("runtime overrides from %s: %w", url, err)
	}
	rt := make(map[string]limits.Override, len(doc.Overrides))
	for _, o := range doc.Overrides {
		updated, _ := time.Parse(time.RFC3339, o.Updated) // unknown (zero) when missing: not shown
		ov, err := set.RuntimeOverride(limits.RuntimeSpec{Name: o.Name, ID: o.ID, Burst: &o.Burst, Count: &o.Count, Period: o.Period, Comment: o.Comment, Updated: updated})
		if err != nil {
			return nil, fmt.Errorf("runtime override %s %q from %s: %w", o.Name, o.ID, url, err)
		}
		rt[ov.Key] = ov
	}
	return rt, nil
}
