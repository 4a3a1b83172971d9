package xds_test

import (
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-rl/sluice/xds"
)

// FuzzConfig feeds arbitrary resource bytes, as a management server could
// send them, to Config: it must answer a config or an error, never panic,
// and a config it accepts must list every domain it holds.
func FuzzConfig(f *testing.F) {
	seeds := []*rlsconfv3.RateLimitConfig{
		limitConfig("a", "a", "k", 10),
		{Name: "n", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", Value: "v*",
			RateLimit:   &rlsconfv3.RateLimitPolicy{Unlimited: true, Name: "x", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "y"}}},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "j", ShadowMode: true, QuotaMode: true, DetailedMetric: true}}}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := xds.Config([]*anypb.Any{{TypeUrl: xds.TypeURL, Value: data}})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("got an empty error message")
			}
			return
		}
		var rc rlsconfv3.RateLimitConfig
		if err := proto.Unmarshal(data, &rc); err != nil {
			t.Fatalf("Config accepted bytes proto.Unmarshal refuses: %v", err)
		}
		if got := cfg.Domains(); len(got) != 1 || got[0] != rc.GetDomain() {
			t.Fatalf("domains: got %q, want [%q]", got, rc.GetDomain())
		}
		_ = cfg.String()
	})
}

// FuzzParseNodeMetadata checks that any text gives pairs with non-empty,
// trimmed keys, or an error.
func FuzzParseNodeMetadata(f *testing.F) {
	for _, s := range []string{"", "a=b", "a:b,c=d", "url=http://x:1", ",,=", "a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := xds.ParseNodeMetadata(s)
		if err != nil {
			return
		}
		for k, v := range m {
			if k == "" || k != strings.TrimSpace(k) || v != strings.TrimSpace(v) {
				t.Fatalf("ParseNodeMetadata(%q): got pair %q=%q, want trimmed, non-empty key", s, k, v)
			}
		}
	})
}
