package replay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/internal/replay"
)

// testConfig: 3 a second per client, 5 a minute per user, and a
// shadow-mode rule of 1 a second per path.
const testConfig = `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
`

func config(t testing.TB, yaml string) *descriptors.Config {
	t.Helper()
	d, err := descriptors.Parse("edge.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// t0 is a minute boundary.
var t0 = time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)

// line is a log line for one descriptor key=value at t0+at.
func line(at time.Duration, key, value string) string {
	return fmt.Sprintf(`{"time":%q,"domain":"edge","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`+"\n",
		t0.Add(at).Format(time.RFC3339Nano), key, value)
}

func run(t *testing.T, log string, o replay.Options) replay.Summary {
	t.Helper()
	s, err := replay.Run(context.Background(), config(t, testConfig), "test.log", strings.NewReader(log), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return s
}

func byRule(s replay.Summary) map[string]replay.Result {
	m := map[string]replay.Result{}
	for _, r := range s.Rules {
		m[r.Rule] = r
	}
	return m
}

func TestReplayCountsPerRule(t *testing.T) {
	var log strings.Builder
	// client a: 5 calls in the first second (3 allowed, 2 over, the first
	// over at 400ms), 2 in the next (a new window: allowed).
	for i := range 5 {
		log.WriteString(line(time.Duration(i)*100*time.Millisecond, "client", "a"))
	}
	log.WriteString(line(1100*time.Millisecond, "client", "a"))
	log.WriteString(line(1200*time.Millisecond, "client", "a"))
	// user u: 7 calls over the first minute: 5 allowed, 2 over from 50s.
	for i := range 7 {
		log.WriteString(line(2*time.Second+time.Duration(i)*8*time.Second, "user", "u"))
	}
	// path /x (shadow mode): 2 in one second, the second over but answered OK.
	log.WriteString(line(59*time.Second, "path", "/x"))
	log.WriteString(line(59*time.Second+time.Millisecond, "path", "/x"))
	// An unknown domain counts nothing.
	log.WriteString(`{"time":"2026-11-23T15:00:59.5Z","domain":"nowhere","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}` + "\n")

	s := run(t, log.String(), replay.Options{})
	got := byRule(s)
	tests := []struct {
		rule                          string
		allowed, overLimit, nearLimit uint64
		firstOver                     time.Duration // -1: never
	}{
		// near: past floor(3*0.8)=2, the 3rd hit of each window.
		{rule: "edge.client", allowed: 5, overLimit: 2, nearLimit: 1, firstOver: 300 * time.Millisecond},
		// near: past floor(5*0.8)=4, the 5th hit.
		{rule: "edge.user", allowed: 5, overLimit: 2, nearLimit: 1, firstOver: 42 * time.Second},
		// A shadow-mode rule's over-limit hits count, though answered OK;
		// near is past floor(1*0.8)=0, so the first hit is near.
		{rule: "edge.path", allowed: 1, overLimit: 1, nearLimit: 1, firstOver: 59*time.Second + time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			r, ok := got[tt.rule]
			if !ok {
				t.Fatalf("no result for %s; got %v", tt.rule, s.Rules)
			}
			if r.Allowed != tt.allowed || r.OverLimit != tt.overLimit || r.NearLimit != tt.nearLimit {
				t.Errorf("got allowed %d, over_limit %d, near_limit %d; want %d, %d, %d",
					r.Allowed, r.OverLimit, r.NearLimit, tt.allowed, tt.overLimit, tt.nearLimit)
			}
			if want := t0.Add(tt.firstOver); !r.FirstOver.Equal(want) {
				t.Errorf("got first_over %s, want %s", r.FirstOver, want)
			}
		})
	}
	if len(s.Rules) != 3 {
		t.Errorf("got %d rules, want 3: %v", len(s.Rules), s.Rules)
	}
	if s.Lines != 17 || !s.First.Equal(t0) || !s.Last.Equal(t0.Add(59500*time.Millisecond)) {
		t.Errorf("got %d lines from %s to %s, want 17 from %s to %s", s.Lines, s.First, s.Last, t0, t0.Add(59500*time.Millisecond))
	}
}

func TestReplayNeverOverHasNoFirstOver(t *testing.T) {
	s := run(t, line(0, "client", "a")+line(time.Second, "client", "a"), replay.Options{})
	r := byRule(s)["edge.client"]
	if r.Allowed != 2 || r.OverLimit != 0 || !r.FirstOver.IsZero() {
		t.Errorf("got %+v, want 2 allowed, none over, no first_over", r)
	}
}

func TestReplayCountsHits(t *testing.T) {
	// hits_addend 2 three times against 3 a second: 2 within, then 1
	// within and 1 over (the second call is over: 4 > 3), then 2 over.
	l := func(ms int) string {
		return fmt.Sprintf(`{"time":%q,"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}]}],"hits_addend":2}`+"\n",
			t0.Add(time.Duration(ms)*time.Millisecond).Format(time.RFC3339Nano))
	}
	r := byRule(run(t, l(0)+l(1)+l(2), replay.Options{}))["edge.client"]
	if r.Allowed != 2 || r.OverLimit != 3 || !r.FirstOver.Equal(t0.Add(time.Millisecond)) {
		t.Errorf("got allowed %d, over_limit %d, first_over %s; want 2, 3, %s", r.Allowed, r.OverLimit, r.FirstOver, t0.Add(time.Millisecond))
	}
}

func TestReplayOptionsChangeAnswers(t *testing.T) {
	log := line(0, "client", "a") + line(1, "client", "a") + line(2, "client", "a")
	tests := []struct {
		name     string
		o        replay.Options
		wantNear uint64
	}{
		{name: "the default near-limit ratio counts the third hit near", o: replay.Options{}, wantNear: 1},
		{name: "a near-limit ratio of 0.5 counts the second and third", o: replay.Options{NearLimitRatio: 0.5}, wantNear: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := byRule(run(t, log, tt.o))["edge.client"].NearLimit; got != tt.wantNear {
				t.Errorf("got near_limit %d, want %d", got, tt.wantNear)
			}
		})
	}
}

func TestReplayOutOfOrder(t *testing.T) {
	tests := []struct {
		name      string
		log       string
		o         replay.Options
		wantErr   string
		wantLines int64
		wantBack  int64
	}{
		{name: "a line a little back in time is replayed at its own time",
			log:       line(500*time.Millisecond, "client", "a") + line(400*time.Millisecond, "client", "a"),
			wantLines: 2, wantBack: 1},
		{name: "a line further back than --max-backstep is an error naming file and line",
			log:     line(5*time.Second, "client", "a") + line(time.Second, "client", "a") + line(0, "client", "a"),
			wantErr: "test.log:2: line goes back in time: time 2026-11-23T15:00:01Z is 4s before an earlier line's 2026-11-23T15:00:05Z"},
		{name: "a negative --max-backstep allows no step back",
			log: line(time.Second, "client", "a") + line(time.Second-time.Nanosecond, "client", "a"),
			o:   replay.Options{MaxBackstep: -1}, wantErr: "test.log:2: line goes back in time"},
		{name: "with skip-bad, a line too far back is skipped",
			log: line(5*time.Second, "client", "a") + line(time.Second, "client", "a") + line(6*time.Second, "client", "a"),
			o:   replay.Options{SkipBad: true}, wantLines: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := replay.Run(context.Background(), config(t, testConfig), "test.log", strings.NewReader(tt.log), tt.o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, replay.ErrBackstep) {
					t.Fatalf("got error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Lines != tt.wantLines || s.Backsteps != tt.wantBack {
				t.Errorf("got %d lines, %d backsteps; want %d, %d", s.Lines, s.Backsteps, tt.wantLines, tt.wantBack)
			}
		})
	}
}

func TestReplayBadLines(t *testing.T) {
	good := line(0, "client", "a")
	tests := []struct {
		name    string
		log     string
		wantErr string
	}{
		{name: "a line that does not decode names file, line and field",
			log:     good + "\n" + `{"time":"2026-11-23T15:00:01Z","domain":"edge","descriptors":[{"entries":[{"key":"client","vaule":"a"}]}]}` + "\n",
			wantErr: `test.log:3: invalid log line: descriptors[0].entries[0]: unknown field "vaule"`},
		{name: "a request the service refuses names file and line",
			log:     good + `{"time":"2026-11-23T15:00:01Z","domain":"","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}` + "\n",
			wantErr: "test.log:2: invalid rate limit request: rate limit domain must not be empty"},
		{name: "a request with no descriptors names file and line",
			log:     `{"time":"2026-11-23T15:00:01Z","domain":"edge"}`,
			wantErr: "test.log:1: invalid rate limit request: rate limit descriptor list must not be empty"},
		{name: "a line longer than a /json body may be",
			log:     good + `{"time":"2026-11-23T15:00:01Z","domain":"` + strings.Repeat("x", replay.MaxLineBytes) + `"}`,
			wantErr: "test.log:2: line longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := replay.Run(context.Background(), config(t, testConfig), "test.log", strings.NewReader(tt.log), replay.Options{})
			var le *replay.LineError
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &le) {
				t.Fatalf("got error %v, want a *LineError containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestReplaySkipBad(t *testing.T) {
	log := line(0, "client", "a") + "not json\n" + line(time.Millisecond, "client", "a") +
		`{"time":"2026-11-23T15:00:00.002Z","domain":"","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}` + "\n"
	log += `{"time":"2026-11-23T15:00:00.003Z","domain":"` + strings.Repeat("x", 2*replay.MaxLineBytes) + "\"}\n" + line(4*time.Millisecond, "client", "a")
	var skipped []string
	s := run(t, log, replay.Options{SkipBad: true, OnSkip: func(err error) { skipped = append(skipped, err.Error()) }})
	if s.Lines != 3 || s.Skipped != 3 {
		t.Errorf("got %d lines, %d skipped; want 3, 3", s.Lines, s.Skipped)
	}
	if len(skipped) != 3 || !strings.HasPrefix(skipped[0], "test.log:2: ") || !strings.HasPrefix(skipped[1], "test.log:4: ") ||
		!strings.HasPrefix(skipped[2], "test.log:5: line longer than") {
		t.Errorf("got skipped %q, want lines 2, 4 and 5 (too long)", skipped)
	}
	if got := byRule(s)["edge.client"].Allowed; got != 3 {
		t.Errorf("got %d allowed, want 3", got)
	}
}

func TestReplayerCarriesCountersAcrossLogs(t *testing.T) {
	r := replay.New(config(t, testConfig), replay.Options{})
	defer r.Close()
	ctx := context.Background()
	if err := r.Replay(ctx, "a.log", strings.NewReader(line(0, "client", "a")+line(1, "client", "a"))); err != nil {
		t.Fatal(err)
	}
	if err := r.Replay(ctx, "b.log", strings.NewReader(line(2, "client", "a")+line(3, "client", "a"))); err != nil {
		t.Fatal(err)
	}
	got := byRule(r.Summary())["edge.client"]
	if got.Allowed != 3 || got.OverLimit != 1 || !got.FirstOver.Equal(t0.Add(3)) {
		t.Errorf("got %+v, want 3 allowed, 1 over at %s", got, t0.Add(3))
	}
}

func TestReplayStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var log strings.Builder
	for i := range 5000 {
		log.WriteString(line(time.Duration(i), "client", "a"))
	}
	_, err := replay.Run(ctx, config(t, testConfig), "test.log", strings.NewReader(log.String()), replay.Options{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestReplayFirstOverPerValueAndForRequestLimits(t *testing.T) {
	cfg := config(t, `domain: edge
descriptors:
  - key: plan
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: client
    rate_limit: {unit: second, requests_per_unit: 100}
`)
	l := func(ms int, key, value, limit string) string {
		return `{"time":"` + t0.Add(time.Duration(ms)*time.Millisecond).Format(time.RFC3339Nano) +
			`","domain":"edge","descriptors":[{"entries":[{"key":"` + key + `","value":"` + value + `"}]` + limit + `}]}` + "\n"
	}
	own := `,"limit":{"requests_per_unit":2,"unit":"SECOND"}`
	log := l(0, "plan", "gold", "") + l(1, "plan", "free", "") + l(2, "plan", "free", "") + // free over at 2ms
		l(3, "client", "a", own) + l(4, "client", "a", own) + l(5, "client", "a", own) + // its own limit of 2: over at 5ms
		l(6, "client", "b", "") + l(7, "plan", "gold", "") + l(8, "plan", "gold", "") // gold over at 7ms
	s, err := replay.Run(context.Background(), cfg, "test.log", strings.NewReader(log), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := byRule(s)
	tests := []struct {
		rule      string
		firstOver time.Duration // -1: never
		overLimit uint64
	}{
		{rule: "edge.plan_free", firstOver: 2 * time.Millisecond, overLimit: 1},
		{rule: "edge.plan_gold", firstOver: 7 * time.Millisecond, overLimit: 2},
		// A request's own limit counts under the stats key of its
		// entries, as in envoyproxy/ratelimit.
		{rule: "edge.client_a", firstOver: 5 * time.Millisecond, overLimit: 1},
		{rule: "edge.client", firstOver: -1},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			r, ok := got[tt.rule]
			if !ok {
				t.Fatalf("no rule %s in %v", tt.rule, s.Rules)
			}
			want := time.Time{}
			if tt.firstOver >= 0 {
				want = t0.Add(tt.firstOver)
			}
			if !r.FirstOver.Equal(want) || r.OverLimit != tt.overLimit {
				t.Errorf("got first_over %s, over_limit %d; want %s, %d", r.FirstOver, r.OverLimit, want, tt.overLimit)
			}
		})
	}
}

// A descriptor with several limits (rate_limits): each limit is a rule of
// its own, and the one that trips gets the first_over, though the status
// names only the closest.
func TestReplaySeveralLimitsOnADescriptor(t *testing.T) {
	cfg := config(t, `
domain: edge
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: minute, requests_per_unit: 3}
`)
	var log strings.Builder
	for i := range 5 { // 1.1 s apart: the minute trips at the 4th, the second never
		log.WriteString(line(time.Duration(i)*1100*time.Millisecond, "user", "u"))
	}
	s, err := replay.Run(context.Background(), cfg, "test.log", strings.NewReader(log.String()), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := byRule(s)
	minute, second := got["edge.user.minute"], got["edge.user.second"]
	if minute.Allowed != 3 || minute.OverLimit != 2 || !minute.FirstOver.Equal(t0.Add(3300*time.Millisecond)) {
		t.Errorf("the minute's limit: got %+v, want 3 allowed, 2 over, first over at +3.3s", minute)
	}
	if second.Allowed != 5 || second.OverLimit != 0 || !second.FirstOver.IsZero() {
		t.Errorf("the second's limit: got %+v, want 5 allowed, never over", second)
	}
}
