package adaptive

import (
	"math"
	"testing"
)

func TestAllowedRateFollowsTheSeed(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	tests := []struct {
		name  string
		avgMs float64
		want  float64
		tol   float64
	}{
		{name: "an instant service gets maxRate", avgMs: 0, want: 240},
		{name: "a healthy service below minValue gets maxRate", avgMs: 120, want: 240},
		{name: "exactly minValue gets maxRate", avgMs: 300, want: 240},
		{name: "5000 ms gets about 177, the seed's example", avgMs: 5000, want: 177, tol: 1},
		{name: "the midpoint gets the mean of the rates", avgMs: 9150, want: 122},
		{name: "exactly maxValue gets minRate", avgMs: 18000, want: 4},
		{name: "gridlock beyond maxValue gets minRate", avgMs: 60000, want: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.AllowedRate(tt.avgMs)
			if math.Abs(got-tt.want) > tt.tol+1e-9 {
				t.Errorf("AllowedRate(%g) = %g, want %g ±%g", tt.avgMs, got, tt.want, tt.tol)
			}
		})
	}
}

func TestAllowedRateAt5000msAdmits178PerWindow(t *testing.T) {
	t.Parallel()
	// 177.33: counts 0..177 are each < the rate, so 178 requests pass.
	if got := quota(DefaultParams().AllowedRate(5000)); got != 178 {
		t.Errorf("quota at 5000 ms = %d, want 178", got)
	}
	if got := quota(DefaultParams().AllowedRate(300)); got != 240 {
		t.Errorf("quota at 300 ms = %d, want 240", got)
	}
}

func TestCurvesAreMonotonicBetweenTheEndPoints(t *testing.T) {
	t.Parallel()
	for _, c := range []Curve{Linear, Inverse} {
		t.Run(c.String()+" never rises as latency grows", func(t *testing.T) {
			p := DefaultParams()
			p.Curve = c
			prev := math.Inf(1)
			for avg := 0.0; avg <= 20000; avg += 7 {
				got := p.AllowedRate(avg)
				if got > prev+1e-9 {
					t.Fatalf("AllowedRate(%g) = %g rose above %g", avg, got, prev)
				}
				if got < p.MinRate-1e-9 || got > p.MaxRate+1e-9 {
					t.Fatalf("AllowedRate(%g) = %g outside [%g, %g]", avg, got, p.MinRate, p.MaxRate)
				}
				prev = got
			}
		})
	}
}

func TestInverseCurvePassesThroughBothEndPoints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Params
	}{
		{name: "the seed's numbers", p: DefaultParams()},
		{name: "other numbers with a non-zero offset", p: Params{MinValue: 100, MaxValue: 5000, MaxRate: 1000, MinRate: 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			p.Curve = Inverse
			k, c := p.inverse()
			if got := k / (p.MinValue + c); math.Abs(got-p.MaxRate) > 1e-9 {
				t.Errorf("rate at minValue = %g, want %g", got, p.MaxRate)
			}
			if got := k / (p.MaxValue + c); math.Abs(got-p.MinRate) > 1e-9 {
				t.Errorf("rate at maxValue = %g, want %g", got, p.MinRate)
			}
			if got := p.AllowedRate(p.MaxValue - 1e-6); math.Abs(got-p.MinRate) > 1e-6 {
				t.Errorf("rate just below maxValue = %g, want about %g", got, p.MinRate)
			}
		})
	}
}

func TestInverseCurveKeepsWorkInFlightConstant(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.Curve = Inverse
	// rate per minute × latency in minutes = requests in flight: 1.2 at
	// every latency with the seed's numbers, where the line peaks near 18.
	for _, avg := range []float64{300, 1000, 5000, 9000, 18000} {
		inflight := p.AllowedRate(avg) * avg / 60000
		if math.Abs(inflight-1.2) > 1e-9 {
			t.Errorf("in flight at %g ms = %g, want 1.2", avg, inflight)
		}
	}
	lin := DefaultParams().AllowedRate(9000) * 9000 / 60000
	if lin < 17 || lin > 19 {
		t.Errorf("linear in flight at 9000 ms = %g, want about 18", lin)
	}
}

func TestRingSlidesAndKeepsTotals(t *testing.T) {
	t.Parallel()
	r := newRing(4)
	r.advance(10)
	r.addAt(10, slot{count: 1})
	r.advance(11)
	r.addAt(11, slot{count: 2, samples: 1, latNs: 5e6})
	if r.total.count != 3 || r.oldest() != 10 {
		t.Fatalf("got total %d oldest %d, want 3 and 10", r.total.count, r.oldest())
	}
	r.advance(13) // slot 10 is still in (9, 13]
	if r.total.count != 3 {
		t.Fatalf("at 13 got total %d, want 3", r.total.count)
	}
	r.advance(14) // slot 10 leaves
	if r.total.count != 2 || r.oldest() != 11 {
		t.Fatalf("at 14 got total %d oldest %d, want 2 and 11", r.total.count, r.oldest())
	}
	if avg, n := r.avgMs(); avg != 5 || n != 1 {
		t.Fatalf("got avg %g over %d, want 5 over 1", avg, n)
	}
	r.advance(100)
	if r.total != (slot{}) || r.oldest() != -1 {
		t.Fatalf("after a long gap got %+v, want an empty window", r.total)
	}
}

func TestRoutesMatchTemplates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/users/{id}", "/users/42", true},
		{"/users/{id}", "/users/", false},
		{"/users/{id}", "/users/42/posts", false},
		{"/users/{id}/posts", "/users/42/posts", true},
		{"/files/{path...}", "/files/a/b/c.txt", true},
		{"/files/{path...}", "/files/", true},
		{"/files/{path...}", "/other/a", false},
		{"/", "/", true},
		{"/", "/x", false},
		{"/about", "/about", true},
		{"/about", "/about/", false},
	}
	for _, tt := range tests {
		r, err := parseRoute(tt.pattern)
		if err != nil {
			t.Fatalf("parseRoute(%q): %v", tt.pattern, err)
		}
		if got := r.match(tt.path); got != tt.want {
			t.Errorf("%q matching %q: got %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
	for _, bad := range []string{"users", "/a/{", "/a/{}", "/a/{x...}/b", "/a/x{y}", "/{a}/{a}"} {
		if _, err := parseRoute(bad); err == nil {
			t.Errorf("parseRoute(%q) succeeded, want an error", bad)
		}
	}
}
