package adaptive

import (
	"fmt"
	"math"
)

// Curve is the shape of the allowed rate between its two end points. The
// zero value is Linear, the seed's straight line.
type Curve uint8

const (
	// Linear interpolates in a straight line from (MinValue, MaxRate) to
	// (MaxValue, MinRate), as the seed's calculateAllowedRate does.
	Linear Curve = iota
	// Inverse makes the rate inversely proportional to latency,
	// rate = k / (avg + c), through the same two end points. By Little's
	// law it keeps the work in flight (rate × latency) roughly constant.
	Inverse
)

// String returns the curve's configuration name: "linear" or "inverse".
func (c Curve) String() string {
	switch c {
	case Linear:
		return "linear"
	case Inverse:
		return "inverse"
	}
	return fmt.Sprintf("curve(%d)", uint8(c))
}

// ParseCurve reads a curve name: "linear" or "inverse".
func ParseCurve(s string) (Curve, error) {
	switch s {
	case "linear":
		return Linear, nil
	case "inverse":
		return Inverse, nil
	}
	return Linear, fmt.Errorf("unknown curve %q, must be linear or inverse", s)
}

// Params are the numbers behind the allowed rate: the seed's minValue,
// maxValue, maxRate and minRate, and the curve between them.
//
// Rates are requests per window (per minute with the default 60 s window);
// latencies are milliseconds. A Params is a plain value, safe to copy and to
// use concurrently. The zero value is not useful: start from DefaultParams.
type Params struct {
	// MinValue is the average response time, in ms, at or below which the
	// service is healthy and MaxRate applies. Default 300; >= 0.
	MinValue float64
	// MaxValue is the average response time, in ms, at or above which the
	// service is overloaded and MinRate applies. Default 18000; > MinValue.
	MaxValue float64
	// MaxRate is the allowed requests per window when healthy. Default 240;
	// > 0.
	MaxRate float64
	// MinRate is the allowed requests per window when overloaded. Default 4;
	// >= 0 and <= MaxRate (> 0 for the inverse curve).
	MinRate float64
	// Curve is the shape between the end points. Default Linear.
	Curve Curve
}

// DefaultParams returns the seed's values: 300 ms, 18000 ms, 240 and 4 per
// minute, on a straight line.
func DefaultParams() Params {
	return Params{MinValue: 300, MaxValue: 18000, MaxRate: 240, MinRate: 4, Curve: Linear}
}

// AllowedRate is the seed's calculateAllowedRate: the number of requests a
// URL may have admitted in the window when its average response time is
// avgMs. MaxRate at or below MinValue, MinRate at or above MaxValue, and in
// between a straight line (Linear) or a hyperbola (Inverse) through both.
//
// The result may be fractional; a request goes through iff the integer
// count of admitted requests is strictly less than it (see the package
// documentation). AllowedRate is a pure function.
func (p Params) AllowedRate(avgMs float64) float64 {
	switch {
	case math.IsNaN(avgMs) || avgMs <= p.MinValue:
		return p.MaxRate
	case avgMs >= p.MaxValue:
		return p.MinRate
	}
	if p.Curve == Inverse && p.MinRate > 0 && p.MaxRate > p.MinRate {
		k, c := p.inverse()
		return k / (avgMs + c)
	}
	return p.MaxRate - (avgMs-p.MinValue)*(p.MaxRate-p.MinRate)/(p.MaxValue-p.MinValue)
}

// inverse fits rate = k / (avg + c) through (MinValue, MaxRate) and
// (MaxValue, MinRate). With MinRate > 0, avg + c is positive on the whole
// interval: MinValue + c = MinRate·(MaxValue−MinValue)/(MaxRate−MinRate).
func (p Params) inverse() (k, c float64) {
	c = (p.MinRate*p.MaxValue - p.MaxRate*p.MinValue) / (p.MaxRate - p.MinRate)
	k = p.MaxRate * (p.MinValue + c)
	return k, c
}

// quota is how many requests a window admits at rate: the number of
// integer counts n >= 0 with n < rate, that is ceil(rate).
func quota(rate float64) int64 {
	if rate <= 0 {
		return 0
	}
	if rate >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(math.Ceil(rate))
}
