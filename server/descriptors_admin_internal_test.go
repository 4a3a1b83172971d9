package server

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/descriptors"
)

func TestDescriptorQuery(t *testing.T) {
	tests := []struct {
		name        string
		query       string
		wantDomain  string
		wantEntries []descriptors.Entry
		wantErr     string
	}{
		{name: "entries keep their order", query: "domain=d&entry=a=1&entry=b=2",
			wantDomain: "d", wantEntries: []descriptors.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}}},
		{name: "an entry splits at its first =", query: "domain=d&entry=path=x=y",
			wantDomain: "d", wantEntries: []descriptors.Entry{{Key: "path", Value: "x=y"}}},
		{name: "an empty value is a value", query: "domain=d&entry=k=",
			wantDomain: "d", wantEntries: []descriptors.Entry{{Key: "k", Value: ""}}},
		{name: "percent-encoding is decoded", query: "domain=my%20d&entry=path=%2Fa%26b",
			wantDomain: "my d", wantEntries: []descriptors.Entry{{Key: "path", Value: "/a&b"}}},
		{name: "an entry without = is refused", query: "domain=d&entry=k", wantErr: `entry 0 "k" has no "="`},
		{name: "two domains are refused", query: "domain=a&domain=b&entry=k=v", wantErr: "domain given 2 times"},
		{name: "an unknown parameter is refused", query: "domain=d&entry=k=v&x=1", wantErr: `unknown query parameter "x"`},
		{name: "a bad escape is refused", query: "domain=%zz", wantErr: "invalid query string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			domain, entries, err := descriptorQuery(tt.query)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if domain != tt.wantDomain || !slices.Equal(entries, tt.wantEntries) {
				t.Fatalf("got %q %v, want %q %v", domain, entries, tt.wantDomain, tt.wantEntries)
			}
		})
	}
}

// FuzzDescriptorQuery: any query string is read or refused without a
// panic, and what is read, encoded again, reads the same.
func FuzzDescriptorQuery(f *testing.F) {
	for _, s := range []string{"domain=d&entry=a=1&entry=b=2", "domain=d&entry=k", "entry==", "domain=%zz", "a;b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		domain, entries, err := descriptorQuery(raw)
		if err != nil {
			return
		}
		q := url.Values{"domain": {domain}}
		for _, e := range entries {
			q.Add("entry", e.Key+"="+e.Value)
		}
		d2, e2, err := descriptorQuery(q.Encode())
		if err != nil || d2 != domain || !slices.Equal(e2, entries) {
			t.Fatalf("%q read %q %v; encoded again %q read %q %v, %v", raw, domain, entries, q.Encode(), d2, e2, err)
		}
	})
}

// FuzzDescriptorBody: any body is read or refused without a panic, and
// what is read passes or fails validDescriptor without one.
func FuzzDescriptorBody(f *testing.F) {
	for _, s := range []string{`{"domain": "d", "entries": [{"key": "k", "value": "v"}]}`, `{"domain": 1}`, `{}`, `[]`, `{"domain": "d"} x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		domain, entries, err := descriptorBody([]byte(body))
		if err != nil {
			return
		}
		_ = validDescriptor(domain, entries)
	})
}
