package stats_test

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/stats"
)

// receive flushes sd and returns the lines a UDP socket got.
func receive(t *testing.T, pc net.PacketConn, sd *stats.StatsD) []string {
	t.Helper()
	if err := sd.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	var lines []string
	buf := make([]byte, 65536)
	_ = pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return lines
		}
		if n > 1432 {
			t.Errorf("datagram of %d bytes, want at most 1432", n)
		}
		lines = append(lines, strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")...)
		_ = pc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	}
}

func listenUDP(t *testing.T) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}

func TestStatsDLineFormats(t *testing.T) {
	hits, err := stats.NewMogrifier("HITS", `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`, "ratelimit.service.rate_limit.$3", "domain:$1,descriptor:$2")
	if err != nil {
		t.Fatal(err)
	}
	tags, err := stats.ParseTags("zone:eu.1,env:prod")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts stats.StatsDOptions
		want []string
	}{
		{name: "StatsD puts extra tags in the name, sorted, as lyft/gostats does",
			opts: stats.StatsDOptions{Protocol: "udp", Tags: tags},
			want: []string{
				"ratelimit.service.rate_limit.api.remote_address_10_0_0_1.total_hits.__env=prod.__zone=eu_1:2|c",
				"ratelimit.service.rate_limit.api.remote_address_10_0_0_1.over_limit.__env=prod.__zone=eu_1:1|c",
				"ratelimit.service.config_load_success.__env=prod.__zone=eu_1:1|c",
			}},
		{name: "DogStatsD puts tags after |#, and a mogrifier turns the key into tags",
			opts: stats.StatsDOptions{DogStatsD: true, Tags: tags, Mogrifiers: []stats.Mogrifier{hits}},
			want: []string{
				"ratelimit.service.rate_limit.total_hits:2|c|#env:prod,zone:eu_1,descriptor:remote_address_10_0_0_1,domain:api",
				"ratelimit.service.rate_limit.over_limit:1|c|#env:prod,zone:eu_1,descriptor:remote_address_10_0_0_1,domain:api",
				"ratelimit.service.config_load_success:1|c|#env:prod,zone:eu_1",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := listenUDP(t)
			st := stats.New()
			r := st.Rule("api.remote_address_10.0.0.1")
			r.TotalHits.Add(2)
			r.OverLimit.Add(1)
			st.ConfigLoad(true)
			tc.opts.Addr = pc.LocalAddr().String()
			sd, err := stats.NewStatsD(st, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := receive(t, pc, sd); !slices.Equal(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestStatsDBoundsWhatItSends(t *testing.T) {
	t.Run("past 1024 calls in an interval, timers are sampled with their rate", func(t *testing.T) {
		pc := listenUDP(t)
		st := stats.New()
		sd, err := stats.NewStatsD(st, stats.StatsDOptions{Addr: pc.LocalAddr().String(), Protocol: "udp"})
		if err != nil {
			t.Fatal(err)
		}
		for range 2048 {
			st.ObserveResponseTime(1500 * time.Microsecond)
		}
		got := receive(t, pc, sd)
		timers := 0
		for _, l := range got {
			if l == "ratelimit_server.ShouldRateLimit.response_time:1500|ms|@0.5" {
				timers++
			}
		}
		if timers != 1024 {
			t.Errorf("got %d sampled timers, want 1024", timers)
		}
		if !slices.Contains(got, "ratelimit_server.ShouldRateLimit.total_requests:2048|c") {
			t.Errorf("total_requests missing or wrong in %d lines", len(got))
		}
	})
	t.Run("past MaxRules keys, further keys share the overflow rule", func(t *testing.T) {
		st := stats.New()
		for i := range stats.MaxRules + 5 {
			st.Rule("d.k_" + strconv.Itoa(i)).TotalHits.Add(1)
		}
		rules := st.Rules()
		if len(rules) != stats.MaxRules+1 {
			t.Fatalf("got %d rules, want %d", len(rules), stats.MaxRules+1)
		}
		if last := rules[len(rules)-1]; last.Key != stats.Overflow || last.TotalHits.Load() != 5 {
			t.Errorf("got last rule %q with %d hits, want %q with 5", last.Key, last.TotalHits.Load(), stats.Overflow)
		}
	})
	t.Run("past MaxRuleBytes of keys, further keys share the overflow rule", func(t *testing.T) {
		// Keys of request values as long as --max-descriptor-entry-bytes
		// allows: the budget in bytes comes long before MaxRules.
		st := stats.New()
		const keyBytes = 1 << 20
		fit := stats.MaxRuleBytes / keyBytes
		for i := range fit + 3 {
			st.Rule(fmt.Sprintf("d.k_%07d_%s", i, strings.Repeat("v", keyBytes-len("d.k_0000000_")))).TotalHits.Add(1)
		}
		rules := st.Rules()
		if len(rules) != fit+1 {
			t.Fatalf("got %d rules, want %d kept and the overflow", len(rules), fit)
		}
		if last := rules[len(rules)-1]; last.Key != stats.Overflow || last.TotalHits.Load() != 3 {
			t.Errorf("got last rule %q with %d hits, want %q with 3", last.Key[:min(len(last.Key), 20)], last.TotalHits.Load(), stats.Overflow)
		}
		// A short key still finds the overflow once the budget is spent.
		if got := st.Rule("d.short").Key; got != stats.Overflow {
			t.Errorf("a short key past the budget: got %q, want %q", got, stats.Overflow)
		}
	})
	t.Run("past MaxDomains or MaxDomainBytes, further domains share the overflow domain", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			nameBytes int
			kept      int
		}{
			{name: "short names, bounded in count", nameBytes: 8, kept: stats.MaxDomains},
			{name: "long names, bounded in bytes", nameBytes: 64 << 10, kept: stats.MaxDomainBytes / (64 << 10)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				st := stats.New()
				for i := range tc.kept + 4 {
					st.DomainNotFound(fmt.Sprintf("%08d", i)+strings.Repeat("d", tc.nameBytes-8), 1)
				}
				ds := st.Domains()
				if len(ds) != tc.kept+1 {
					t.Fatalf("got %d domains, want %d kept and the overflow", len(ds), tc.kept)
				}
				if last := ds[len(ds)-1]; last.Name != stats.Overflow || last.NotFound.Load() != 4 {
					t.Errorf("got last domain %.20q with %d, want %q with 4", last.Name, last.NotFound.Load(), stats.Overflow)
				}
			})
		}
	})
}

func TestStatsDRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    stats.StatsDOptions
		wantErr string
	}{
		{name: "an address without a port", opts: stats.StatsDOptions{Addr: "localhost"}, wantErr: `statsd address "localhost"`},
		{name: "an unknown protocol", opts: stats.StatsDOptions{Addr: "localhost:8125", Protocol: "sctp"}, wantErr: `statsd protocol "sctp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stats.NewStatsD(stats.New(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestRecordingAnExistingKeyDoesNotAllocate(t *testing.T) {
	st := stats.New()
	st.Rule("d.k")
	if n := testing.AllocsPerRun(100, func() {
		st.Rule("d.k").TotalHits.Add(1)
		st.ObserveResponseTime(time.Millisecond)
	}); n != 0 {
		t.Errorf("got %v allocations per call, want 0", n)
	}
}

// EXTRA_TAGS and mogrifier tags come from the environment: any text is
// parsed or refused, never a panic, and parsed tags are whole and sorted.
func FuzzParseTags(f *testing.F) {
	f.Add("env:prod,zone:eu.1")
	f.Add("a:b:c,,d:e")
	f.Add(":x")
	f.Fuzz(func(t *testing.T, s string) {
		tags, err := stats.ParseTags(s)
		if err != nil {
			return
		}
		for i, tag := range tags {
			if tag.Key == "" || tag.Value == "" {
				t.Fatalf("%q: tag %d %+v is not whole", s, i, tag)
			}
			if i > 0 && tags[i-1].Key > tag.Key {
				t.Fatalf("%q: tags not sorted: %+v", s, tags)
			}
		}
	})
}

// A stat whose line is longer than a UDP datagram can carry (a key built
// from a 64 KiB request value under detailed_metric) cannot be sent over
// UDP: it is skipped and counted, and the other stats of the same flush
// still go out (the datagram's error used to end the flush, losing them).
func TestStatsDSkipsALineTooLongForADatagram(t *testing.T) {
	pc := listenUDP(t)
	st := stats.New()
	sd, err := stats.NewStatsD(st, stats.StatsDOptions{Addr: pc.LocalAddr().String(), Protocol: "udp"})
	if err != nil {
		t.Fatal(err)
	}
	st.Rule("d.k_" + strings.Repeat("v", 70_000)).TotalHits.Add(1) // first in the flush
	st.Rule("d.short").TotalHits.Add(2)
	if err := sd.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	var got []string
	buf := make([]byte, 1<<16)
	_ = pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			break
		}
		got = append(got, strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")...)
	}
	if !slices.Contains(got, "ratelimit.service.rate_limit.d.short.total_hits:2|c") {
		t.Errorf("the short rule's line missing from %d lines", len(got))
	}
	for _, l := range got {
		if len(l) > 65_000 {
			t.Errorf("a line of %d bytes went out", len(l))
		}
	}
	if n := sd.TooLong(); n != 1 {
		t.Errorf("TooLong: %d, want 1", n)
	}
}
