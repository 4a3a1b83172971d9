package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/app"
)

// A refused /json request keeps envoyproxy/ratelimit's plain body and says
// why in X-Sluice-Error.
func TestJSONErrorsCarryTheirReasonInAHeader(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, func(o *app.Options) { o.MaxDescriptors = 1 })
	for _, tt := range []struct{ name, body, want string }{
		{"an empty domain", `{"domain": ""}`, "domain"},
		{"a body that is not JSON", `{"domain": `, "unexpected"},
		{"too many descriptors", `{"domain": "d", "descriptors": [{"entries": [{"key": "a", "value": "b"}]}, {"entries": [{"key": "a", "value": "b"}]}]}`, "max-descriptors"},
		{"invalid UTF-8", "{\"domain\": \"\xff\xfe\"}", "UTF-8"},
	} {
		t.Run(tt.name+" is refused with its reason", func(t *testing.T) {
			resp, err := ta.http.Post("http://"+ta.HTTPAddr()+"/json", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || string(body) != "Bad Request\n" {
				t.Errorf("got %d %q, want 400 %q", resp.StatusCode, body, "Bad Request\n")
			}
			got := resp.Header.Get("X-Sluice-Error")
			if !strings.Contains(got, tt.want) {
				t.Errorf("X-Sluice-Error: got %q, want it to mention %q", got, tt.want)
			}
			for _, c := range []byte(got) {
				if c < 0x20 || c > 0x7e {
					t.Errorf("X-Sluice-Error: got byte %#x in %q, want printable ASCII", c, got)
					break
				}
			}
		})
	}
}

// An HTTP request's header block is bounded by --http-max-header-bytes
// (64 KiB): a header as long as Envoy's own default limit passes, a longer
// one is answered 431, on every HTTP listener. With net/http's 1 MiB,
// 2,000 connections sending long headers slowly held 2.9 GB.
func TestHTTPHeadersAreBounded(t *testing.T) {
	ta := start(t, map[string]string{"conf.yaml": conformanceConfig}, nil)
	for _, tt := range []struct {
		name   string
		header int
		want   int
	}{
		{"a 60 KiB header is taken", 60 << 10, http.StatusOK},
		{"a 70 KiB header is refused", 70 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		for _, url := range []string{"http://" + ta.HTTPAddr() + "/healthcheck", "http://" + ta.DebugAddr() + "/metrics"} {
			t.Run(tt.name+" on "+url, func(t *testing.T) {
				req, err := http.NewRequest(http.MethodGet, url, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Long", strings.Repeat("h", tt.header))
				resp, err := ta.http.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Errorf("got %d, want %d", resp.StatusCode, tt.want)
				}
			})
		}
	}
}
