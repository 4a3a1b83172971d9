package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func (ta *testApp) post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := ta.http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (ta *testApp) get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := ta.http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestJSONEndpoint(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	url := "http://" + ta.HTTPAddr() + "/json"
	body := `{"domain": "basic", "descriptors": [{"entries": [{"key": "ip", "value": "9.9.9.9"}]}]}`
	for i := 1; i <= 3; i++ {
		code, out := ta.post(t, url, body)
		if code != http.StatusOK {
			t.Fatalf("request %d: got %d %s, want 200", i, code, out)
		}
		var resp struct {
			OverallCode string `json:"overallCode"`
			Statuses    []struct {
				Code           string `json:"code"`
				LimitRemaining int    `json:"limitRemaining"`
			} `json:"statuses"`
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("decode %s: %v", out, err)
		}
		if resp.OverallCode != "OK" || resp.Statuses[0].LimitRemaining != 3-i {
			t.Fatalf("request %d: got %s, want OK with %d remaining", i, out, 3-i)
		}
	}
	code, out := ta.post(t, url, body)
	if code != http.StatusTooManyRequests || !strings.Contains(out, `"OVER_LIMIT"`) {
		t.Fatalf("over the limit: got %d %s, want 429 with OVER_LIMIT", code, out)
	}

	bad := []struct{ name, body string }{
		{"an empty body", ""},
		{"malformed JSON", `{"domain": `},
		{"an ill-typed field", `{"domain": 7}`},
		{"an unknown field", `{"domain": "basic", "colour": "red"}`},
		{"no descriptors", `{"domain": "basic"}`},
		{"an empty domain", `{"domain": "", "descriptors": [{"entries": [{"key": "a", "value": "b"}]}]}`},
	}
	for _, b := range bad {
		t.Run(b.name+" gets 400", func(t *testing.T) {
			code, out := ta.post(t, url, b.body)
			// envoyproxy/ratelimit's answer, word for word.
			if code != http.StatusBadRequest || out != "Bad Request\n" {
				t.Fatalf("got %d %q, want 400 \"Bad Request\\n\"", code, out)
			}
		})
	}
	// Like envoyproxy/ratelimit, any method with a request in its body is
	// served.
	req, err := http.NewRequest(http.MethodGet, url, strings.NewReader(`{"domain": "basic", "descriptors": [{"entries": [{"key": "ip", "value": "8.8.8.8"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ta.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var answer struct {
		Statuses []struct {
			LimitRemaining int `json:"limitRemaining"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal(got, &answer); resp.StatusCode != http.StatusOK || err != nil || answer.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("GET /json with a body: got %d %s, want 200 with 2 remaining", resp.StatusCode, got)
	}
	if code, out := ta.get(t, url); code != http.StatusBadRequest || out != "Bad Request\n" {
		t.Fatalf("GET /json without a body: got %d %q, want 400", code, out)
	}
}

func TestHealthcheck(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	code, body := ta.get(t, "http://"+ta.HTTPAddr()+"/healthcheck")
	if code != http.StatusOK || body != "OK" {
		t.Fatalf("got %d %q, want 200 OK", code, body)
	}
}

func TestMetricsAndRLConfig(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	for range 5 {
		ta.ask(t, "basic", desc("ip", "7.7.7.7"))
	}
	ta.ask(t, "missing", desc("ip", "7.7.7.7"))
	code, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: got %d", code)
	}
	for _, want := range []string{
		`sluice_ratelimit_total_hits{rule="basic.ip"} 5`,
		`sluice_ratelimit_within_limit{rule="basic.ip"} 3`,
		`sluice_ratelimit_over_limit{rule="basic.ip"} 2`,
		`sluice_ratelimit_near_limit{rule="basic.ip"} 1`,
		`sluice_ratelimit_domain_not_found_total 1`,
		`sluice_config_last_reload_successful{kind="descriptors"} 1`,
		`sluice_ratelimit_requests_total{code="OK"} 6`,
		`sluice_ratelimit_request_duration_seconds_count 6`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	code, body = ta.get(t, "http://"+ta.DebugAddr()+"/rlconfig")
	if code != http.StatusOK || !strings.Contains(body, "basic.database_users: unit=SECOND requests_per_unit=20") {
		t.Fatalf("/rlconfig: got %d %q", code, body)
	}
	if n := strings.Count(strings.TrimSpace(body), "\n") + 1; n < 8 {
		t.Fatalf("/rlconfig: got %d lines, want one per rule (at least 8)", n)
	}
	if code, _ := ta.get(t, "http://"+ta.DebugAddr()+"/debug/pprof/"); code != http.StatusOK {
		t.Fatalf("/debug/pprof/: got %d", code)
	}
}
