package app_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/replay"
)

// replayDomain has a per-second rule, a per-minute rule, a rule per value
// of a key (detailed_metric: a stats key per value) and a shadow-mode
// rule.
const replayDomain = `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: plan
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// served is what the service answered one rule, counted from its answers.
type served struct {
	allowed, over int
	firstOver     time.Time
}

// waitLines waits until path holds n lines (the writer flushes when idle).
func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		got := bytes.Count(data, []byte{'\n'})
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request log holds %d lines, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReplayEqualsServe sends a mix of requests over gRPC and /json to a
// service writing the request log, then replays the log against the same
// config: per rule, the replay's allowed, over_limit and first_over equal
// what the service answered, and its near_limit what the service's
// metrics say.
func TestReplayEqualsServe(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "requests.log")
	ta := start(t, map[string]string{"edge.yaml": replayDomain}, func(o *app.Options) { o.RequestLog = logPath })

	type step struct {
		after time.Duration // clock advance before the request
		json  bool          // over /json rather than gRPC
		descs [][2]string   // key, value per descriptor
	}
	var steps []step
	// client=a: 5 calls a second for 3 seconds (3 allowed, 2 over each
	// second), some over /json; user=u 3 times in each of those seconds
	// (4 a minute: over from the 5th); plan=gold and plan=free
	// alternately; path=/x twice a second (shadow: over, answered OK).
	for sec := range 3 {
		for i := range 5 {
			after := 150 * time.Millisecond
			if i == 0 && sec > 0 {
				after = 400 * time.Millisecond // into the next second
			}
			if sec == 0 && i == 0 {
				after = 0
			}
			s := step{after: after, json: i%2 == 1, descs: [][2]string{{"client", "a"}}}
			if i < 3 {
				s.descs = append(s.descs, [2]string{"user", "u"})
			}
			s.descs = append(s.descs, [2]string{"plan", []string{"gold", "free"}[i%2]})
			if i < 2 {
				s.descs = append(s.descs, [2]string{"path", "/x"})
			}
			steps = append(steps, s)
		}
	}
	// A minute later user=u is allowed again; an unknown domain counts
	// nothing.
	steps = append(steps, step{after: time.Minute, descs: [][2]string{{"user", "u"}}})

	rules := map[string]string{"client": "edge.client", "user": "edge.user", "path": "edge.path"}
	got := map[string]*served{}
	for i, s := range steps {
		ta.clock.Add(s.after)
		req := &rlsv3.RateLimitRequest{Domain: "edge"}
		for _, d := range s.descs {
			req.Descriptors = append(req.Descriptors, desc(d[0], d[1]))
		}
		var resp *rlsv3.RateLimitResponse
		if s.json {
			resp = askJSON(t, ta, req)
		} else {
			resp = ta.askReq(t, req)
		}
		if len(resp.Statuses) != len(s.descs) {
			t.Fatalf("step %d: got %d statuses, want %d", i, len(resp.Statuses), len(s.descs))
		}
		for j, d := range s.descs {
			rule, ok := rules[d[0]]
			if !ok {
				rule = "edge.plan_" + d[1] // detailed_metric
			}
			sv := got[rule]
			if sv == nil {
				sv = &served{}
				got[rule] = sv
			}
			st := resp.Statuses[j]
			over := st.Code == rlsv3.RateLimitResponse_OVER_LIMIT
			if d[0] == "path" {
				// A shadow-mode rule answers OK, over its limit or not (the
				// metrics below tell): with 1 a minute, every path call
				// after the first, all in the first minute, is over.
				if st.Code != rlsv3.RateLimitResponse_OK {
					t.Fatalf("step %d: the shadow-mode rule answered %s, want OK", i, st.Code)
				}
				over = sv.allowed+sv.over > 0
			}
			if over {
				sv.over++
				if sv.firstOver.IsZero() {
					sv.firstOver = ta.clock.Now()
				}
			} else {
				sv.allowed++
			}
		}
	}
	waitLines(t, logPath, len(steps))

	cfg, err := descriptors.Load(ta.dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, err := replay.Run(context.Background(), cfg, logPath, f, replay.Options{})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if sum.Lines != int64(len(steps)) || sum.Backsteps != 0 {
		t.Errorf("replayed %d lines (%d back in time), want %d (0)", sum.Lines, sum.Backsteps, len(steps))
	}
	near := ruleCounters(t, ta, "sluice_ratelimit_near_limit")
	within := ruleCounters(t, ta, "sluice_ratelimit_within_limit")
	overMetric := ruleCounters(t, ta, "sluice_ratelimit_over_limit")
	if len(sum.Rules) != len(got) {
		t.Errorf("replay has %d rules, serve answered %d: %v", len(sum.Rules), len(got), sum.Rules)
	}
	for _, r := range sum.Rules {
		t.Run(r.Rule, func(t *testing.T) {
			sv := got[r.Rule]
			if sv == nil {
				t.Fatalf("replay has rule %s, serve answered none", r.Rule)
			}
			if int(r.Allowed) != sv.allowed || int(r.OverLimit) != sv.over {
				t.Errorf("got allowed %d, over_limit %d; serve answered %d allowed, %d over", r.Allowed, r.OverLimit, sv.allowed, sv.over)
			}
			if !r.FirstOver.Equal(sv.firstOver) {
				t.Errorf("got first_over %s, serve's first over-limit answer was at %s", r.FirstOver, sv.firstOver)
			}
			if r.NearLimit != near[r.Rule] || r.Allowed != within[r.Rule] || r.OverLimit != overMetric[r.Rule] {
				t.Errorf("got near_limit %d, allowed %d, over_limit %d; serve's metrics say near_limit %d, within_limit %d, over_limit %d",
					r.NearLimit, r.Allowed, r.OverLimit, near[r.Rule], within[r.Rule], overMetric[r.Rule])
			}
		})
	}
	// The mix did reach every case: something over on each rule but plan.
	for _, rule := range []string{"edge.client", "edge.user", "edge.path"} {
		if got[rule] == nil || got[rule].over == 0 {
			t.Errorf("serve answered no over-limit call for %s: the test does not test it", rule)
		}
	}
}

// askJSON asks over /json.
func askJSON(t *testing.T, ta *testApp, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := ta.http.Post("http://"+ta.HTTPAddr()+"/json", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(hr.Body)
	if hr.StatusCode != http.StatusOK && hr.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("/json: %s %s", hr.Status, buf.String())
	}
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(buf.Bytes(), &resp); err != nil {
		t.Fatalf("/json answer %q: %v", buf.String(), err)
	}
	return &resp
}

// ruleCounters reads a sluice_ratelimit_* counter of every rule from the
// service's registry.
func ruleCounters(t *testing.T, ta *testApp, name string) map[string]uint64 {
	t.Helper()
	mfs, err := ta.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rule" {
					out[l.GetValue()] = uint64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

func TestRequestLogOptions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, o app.Options)
	}{
		{name: "the request log is off by default with a sample of 1",
			check: func(t *testing.T, o app.Options) {
				if o.RequestLog != "" || o.RequestLogSample != 1 {
					t.Errorf("got %q, %v; want off, 1", o.RequestLog, o.RequestLogSample)
				}
			}},
		{name: "flags set the file and the sample",
			args: []string{"--request-log", filepath.Join(dir, "r.log"), "--request-log-sample", "0.25"},
			check: func(t *testing.T, o app.Options) {
				if o.RequestLog != filepath.Join(dir, "r.log") || o.RequestLogSample != 0.25 {
					t.Errorf("got %q, %v; want r.log, 0.25", o.RequestLog, o.RequestLogSample)
				}
			}},
		{name: "SLUICE_REQUEST_LOG and SLUICE_REQUEST_LOG_SAMPLE set them too",
			env: map[string]string{"SLUICE_REQUEST_LOG": "/var/log/r.log", "SLUICE_REQUEST_LOG_SAMPLE": "0.5"},
			check: func(t *testing.T, o app.Options) {
				if o.RequestLog != "/var/log/r.log" || o.RequestLogSample != 0.5 {
					t.Errorf("got %q, %v; want /var/log/r.log, 0.5", o.RequestLog, o.RequestLogSample)
				}
			}},
		{name: "a sample of 0 is refused", args: []string{"--request-log-sample", "0"}, wantErr: "--request-log-sample: 0 is outside (0, 1]"},
		{name: "a sample above 1 is refused", args: []string{"--request-log-sample", "1.5"}, wantErr: "--request-log-sample: 1.5 is outside (0, 1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := app.ParseServe(tt.args, func(k string) string { return tt.env[k] }, &bytes.Buffer{})
			if err == nil {
				err = o.Validate()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
}

func TestRequestLogUnwritableFileFailsAtStart(t *testing.T) {
	o := app.Defaults()
	o.RequestLog = filepath.Join(t.TempDir(), "missing", "r.log")
	_, err := app.New(o, app.Deps{})
	if err == nil || !strings.Contains(err.Error(), "--request-log: request log: open") {
		t.Fatalf("got %v, want an error naming --request-log and the file", err)
	}
}
