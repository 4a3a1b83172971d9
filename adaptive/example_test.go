package adaptive_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-rl/sluice/adaptive"
	"github.com/sluice-rl/sluice/clock"
)

func ExampleParams_AllowedRate() {
	p := adaptive.DefaultParams()
	for _, avg := range []float64{120, 300, 5000, 18000, 25000} {
		fmt.Printf("%5.0f ms -> %.2f per minute\n", avg, p.AllowedRate(avg))
	}
	p.Curve = adaptive.Inverse
	fmt.Printf("inverse at 5000 ms -> %.2f per minute\n", p.AllowedRate(5000))
	// Output:
	//   120 ms -> 240.00 per minute
	//   300 ms -> 240.00 per minute
	//  5000 ms -> 177.33 per minute
	// 18000 ms -> 4.00 per minute
	// 25000 ms -> 4.00 per minute
	// inverse at 5000 ms -> 14.40 per minute
}

func ExampleDefaultConfig() {
	c := adaptive.DefaultConfig()
	fmt.Println(c.MinValue, c.MaxValue, c.MaxRate, c.MinRate, c.Curve)
	fmt.Println(c.CountMetricName, c.ValueMetricName, c.Window, c.MaxKeys)
	fmt.Println(c.Rules.Asset.Contains, c.Rules.Asset.Suffixes)
	// Output:
	// 300 18000 240 4 linear
	// request.count.by.url request.resp.avg.by.url 1m0s 10000
	// [/api/] [.js .css .png .json]
}

func ExampleParseConfig() {
	_, err := adaptive.ParseConfig("adaptive.yaml", []byte("minValue: 300\nmaxRate: -1\nwindow: soon\n"))
	fmt.Println(err)
	// Output:
	// adaptive.yaml:2: maxRate: invalid value -1, must be > 0
	// adaptive.yaml:3: window: invalid duration "soon", want a Go duration such as 60s or 1m
}

func ExampleLimiter_Middleware() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := adaptive.DefaultConfig()
	cfg.MaxRate = 2
	cfg.MinRate = 1
	l, err := adaptive.New(cfg, adaptive.Options{Clock: clk})
	if err != nil {
		panic(err)
	}
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))
	for _, path := range []string{"/", "/", "/", "/app.js"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Printf("%s %d Retry-After=%q\n", path, w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// / 200 Retry-After=""
	// / 200 Retry-After=""
	// / 429 Retry-After="60"
	// /app.js 200 Retry-After=""
}
