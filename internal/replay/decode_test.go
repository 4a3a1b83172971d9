package replay

import (
	"errors"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// bodyOf is the request a log line carries, as protojson (which /json
// uses) reads it, "time" aside.
func bodyOf(t testing.TB, line string) *rlsv3.RateLimitRequest {
	t.Helper()
	var req rlsv3.RateLimitRequest
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(line), &req); err != nil {
		t.Fatalf("protojson refuses %s: %v", line, err)
	}
	return &req
}

func TestDecodeGoodLines(t *testing.T) {
	tests := []struct {
		name     string
		line     string
		wantTime time.Time
	}{
		{name: "the request log's own shape decodes on the fast path",
			line:     `{"time":"2026-11-23T15:04:05.25Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}`,
			wantTime: time.Date(2026, 11, 23, 15, 4, 5, 250_000_000, time.UTC)},
		{name: "several descriptors and entries",
			line:     `{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[{"key":"a","value":"1"},{"key":"b","value":"2"}]},{"entries":[{"key":"c","value":"3"}]}]}`,
			wantTime: time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC)},
		{name: "spaces, another field order and camelCase names",
			line:     ` { "domain" : "edge", "hitsAddend": 3, "time": "2026-11-23T16:04:05.000000001+01:00", "descriptors": [ { "hitsAddend": "7", "isNegativeHits": false, "entries": [ { "value": "v", "key": "k" } ] } ] } `,
			wantTime: time.Date(2026, 11, 23, 15, 4, 5, 1, time.UTC)},
		{name: "a descriptor's own limit, hits_addend and is_negative_hits",
			line:     `{"time":"2026-11-23T15:04:05.5Z","domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":10,"unit":"MINUTE","unit_multiplier":2},"hits_addend":0,"is_negative_hits":true}],"hits_addend":2}`,
			wantTime: time.Date(2026, 11, 23, 15, 4, 5, 500_000_000, time.UTC)},
		{name: "a unit as a number and nulls for defaults",
			line:     `{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[{"key":"k","value":null}],"limit":{"requestsPerUnit":"5","unit":3,"unitMultiplier":null},"hits_addend":null}],"hits_addend":null}`,
			wantTime: time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC)},
		{name: "escapes in strings",
			line:     `{"time":"2026-11-23T15:04:05Z","domain":"ed\u0067e","descriptors":[{"entries":[{"key":"path","value":"/a\"b\\c\/d\n\u00e9\ud83d\ude00"}]}]}`,
			wantTime: time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC)},
		{name: "UTF-8 as it is",
			line:     `{"time":"2026-11-23T15:04:05Z","domain":"édge","descriptors":[{"entries":[{"key":"ключ","value":"値"}]}]}`,
			wantTime: time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC)},
		{name: "no descriptors at all decodes (the service refuses it later)",
			line:     `{"time":"2026-11-23T15:04:05Z","domain":"edge"}`,
			wantTime: time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDecoder()
			// Twice: the second line reuses the first one's messages and
			// strings, and must give the same request.
			for round := range 2 {
				at, req, err := d.decode([]byte(tt.line))
				if err != nil {
					t.Fatalf("round %d: got error %v, want none", round, err)
				}
				if !at.Equal(tt.wantTime) {
					t.Errorf("round %d: got time %s, want %s", round, at, tt.wantTime)
				}
				if want := bodyOf(t, tt.line); !proto.Equal(req, want) {
					t.Errorf("round %d: got request %v, want %v", round, req, want)
				}
			}
		})
	}
}

func TestDecodeReusesNothingStale(t *testing.T) {
	d := newDecoder()
	lines := []string{
		`{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[{"key":"a","value":"1"},{"key":"b","value":"2"}]},{"entries":[{"key":"c","value":"3"}],"limit":{"requests_per_unit":1,"unit":"SECOND"},"hits_addend":4}],"hits_addend":2}`,
		`{"time":"2026-11-23T15:04:06Z","domain":"other","descriptors":[{"entries":[{"key":"a"}]}]}`,
		`{"time":"2026-11-23T15:04:07Z","domain":"edge","descriptors":[{"entries":[{"value":"x","key":"z"}]},{"entries":[{"key":"c","value":"3"}]}]}`,
	}
	for i, line := range lines {
		_, req, err := d.decode([]byte(line))
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if want := bodyOf(t, line); !proto.Equal(req, want) {
			t.Errorf("line %d: got request %v, want %v", i+1, req, want)
		}
	}
}

func TestDecodeBadLines(t *testing.T) {
	tests := []struct {
		name string
		line string
		want string // in the error
	}{
		{name: "not JSON", line: `hello`, want: `want '{', got 'h'`},
		{name: "a missing time", line: `{"domain":"edge","descriptors":[]}`, want: `missing "time"`},
		{name: "a time that is not RFC 3339", line: `{"time":"23/11/2026 15:04","domain":"edge"}`, want: `time: time must be RFC 3339`},
		{name: "a time with a day out of range", line: `{"time":"2026-02-30T15:04:05Z","domain":"edge"}`, want: `time: time must be RFC 3339`},
		{name: "a number for the time", line: `{"time":1700000000,"domain":"edge"}`, want: `time: want a string, got '1'`},
		{name: "an unknown top-level field", line: `{"time":"2026-11-23T15:04:05Z","domian":"edge"}`, want: `unknown field "domian"`},
		{name: "an unknown descriptor field names the descriptor",
			line: `{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[]},{"entries":[],"weight":2}]}`,
			want: `descriptors[1]: unknown field "weight"`},
		{name: "an unknown entry field names the entry",
			line: `{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[{"key":"a","value":"b"},{"key":"a","val":"b"}]}]}`,
			want: `descriptors[0].entries[1]: unknown field "val"`},
		{name: "a number where a string belongs",
			line: `{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[{"key":"a","value":5}]}]}`,
			want: `descriptors[0].entries[0].value: want a string, got '5'`},
		{name: "an unknown unit",
			line: `{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[],"limit":{"requests_per_unit":1,"unit":"FORTNIGHT"}}]}`,
			want: `descriptors[0].limit.unit: unknown unit "FORTNIGHT"`},
		{name: "a negative hits_addend", line: `{"time":"2026-11-23T15:04:05Z","domain":"edge","hits_addend":-1}`, want: `hits_addend: want an unsigned integer`},
		{name: "a request hits_addend past uint32", line: `{"time":"2026-11-23T15:04:05Z","domain":"edge","hits_addend":4294967296}`, want: `hits_addend: number 4294967296 too large`},
		{name: "a fractional hits_addend", line: `{"time":"2026-11-23T15:04:05Z","domain":"edge","hits_addend":1.5}`, want: `hits_addend: want an unsigned integer`},
		{name: "a duplicate field", line: `{"time":"2026-11-23T15:04:05Z","domain":"a","domain":"b"}`, want: `domain: duplicate field "domain"`},
		{name: "a cut-off line", line: `{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[{"key":"a"`, want: `unexpected end of line`},
		{name: "text after the object", line: `{"time":"2026-11-23T15:04:05Z","domain":"edge"} x`, want: `unexpected 'x' after the request object`},
		{name: "an invalid escape", line: `{"time":"2026-11-23T15:04:05Z","domain":"a\qb"}`, want: `domain: invalid escape \q`},
		{name: "a control character in a string", line: "{\"time\":\"2026-11-23T15:04:05Z\",\"domain\":\"a\tb\"}", want: `domain: control character 0x9`},
		{name: "invalid UTF-8", line: "{\"time\":\"2026-11-23T15:04:05Z\",\"domain\":\"a\xffb\"}", want: `domain: invalid UTF-8`},
		{name: "a lone surrogate", line: `{"time":"2026-11-23T15:04:05Z","domain":"\ud83d"}`, want: `domain: invalid surrogate pair`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := newDecoder().decode([]byte(tt.line))
			if err == nil {
				t.Fatalf("got no error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !errors.Is(err, errSyntax) {
				t.Errorf("got error %q, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestParseTimeAgreesWithTimeParse(t *testing.T) {
	for _, s := range []string{
		"2026-11-23T15:04:05Z", "2026-11-23T15:04:05.1Z", "2026-11-23T15:04:05.123456789Z",
		"2024-02-29T23:59:59.999999999+14:00", "1970-01-01T00:00:00-00:30", "0000-01-01T00:00:00Z",
		"9999-12-31T23:59:59Z", "2000-03-01T00:00:00+05:45",
	} {
		want, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("time.Parse(%q): %v", s, err)
		}
		got, err := parseTime([]byte(s))
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	for _, s := range []string{
		"2026-11-23T15:04:05", "2026-11-23 15:04:05Z", "2026-13-01T00:00:00Z", "2023-02-29T00:00:00Z",
		"2026-11-23T24:00:00Z", "2026-11-23T15:04:05.Z", "2026-11-23T15:04:05.1234567891Z", "2026-11-23T15:04:05+1:00",
		"2026-11-23T15:04:05+01:00x", "2026-11-23t15:04:05Z", "2026-11-23T15:04:05z",
	} {
		if got, err := parseTime([]byte(s)); err == nil {
			t.Errorf("parseTime(%q) = %s, want an error", s, got)
		}
	}
}

func TestDecoderTimeCacheFollowsTheSecond(t *testing.T) {
	d := newDecoder()
	for _, s := range []string{
		"2026-11-23T15:04:05Z", "2026-11-23T15:04:05.5Z", "2026-11-23T15:04:05.000000007Z",
		"2026-11-23T15:04:06.25Z", "2026-11-23T15:04:06Z", "2026-11-23T15:04:06.5+00:00", "2026-11-23T15:04:06.75Z",
	} {
		want, _ := time.Parse(time.RFC3339Nano, s)
		got, err := d.time([]byte(s))
		if err != nil || !got.Equal(want) {
			t.Errorf("time(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	if _, err := d.time([]byte("2026-11-23T15:04:06.7xZ")); err == nil {
		t.Error("got no error for a bad fraction in a cached second, want one")
	}
}

// FuzzDecode holds the decoder to protojson, which /json uses: a line the
// decoder accepts is a request protojson decodes the same (its "time" an
// unknown field to it), and no line makes it panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"time":"2026-11-23T15:04:05.25Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}`,
		`{"time":"2026-11-23T15:04:05Z","domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":10,"unit":"MINUTE","unit_multiplier":2},"hits_addend":"0","is_negative_hits":true}],"hits_addend":2}`,
		`{"time":"2026-11-23T15:04:05Z","domain":"a\u00e9\"b","descriptors":null}`,
		` { "domain" : "edge", "hitsAddend": 3, "time": "2026-11-23T16:04:05.000000001+01:00", "descriptors": [ { "hitsAddend": "7", "entries": [ { "value": "v", "key": "k" } ] } ] } `,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		_, req, err := newDecoder().decode([]byte(line))
		if err != nil {
			return
		}
		var want rlsv3.RateLimitRequest
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(line), &want); err != nil {
			t.Fatalf("the decoder accepts %q, protojson refuses it: %v", line, err)
		}
		if !proto.Equal(req, &want) {
			t.Fatalf("got %v, protojson reads %v", req, &want)
		}
	})
}

// FuzzParseTime holds parseTime to time.Parse: a time it accepts,
// time.Parse reads as the same instant.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-11-23T15:04:05Z", "2024-02-29T23:59:59.999999999+14:00", "1970-01-01T00:00:00-00:30"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseTime([]byte(s))
		if err != nil {
			return
		}
		want, werr := time.Parse(time.RFC3339Nano, s)
		if werr != nil {
			t.Fatalf("parseTime accepts %q as %s, time.Parse refuses it: %v", s, got, werr)
		}
		if !got.Equal(want) {
			t.Fatalf("parseTime(%q) = %s, time.Parse gives %s", s, got, want)
		}
	})
}

// BenchmarkDecode decodes one line: on the fast path (the request log's
// own shape), on the general path (the same request with spaces), and,
// for comparison, with protojson as /json does (its "time" skipped).
func BenchmarkDecode(b *testing.B) {
	fast := []byte(`{"time":"2026-11-23T15:00:00.123456Z","domain":"edge","descriptors":[{"entries":[{"key":"client","value":"10.0.3.77"}]}]}`)
	general := []byte(`{"time": "2026-11-23T15:00:00.123456Z", "domain": "edge", "descriptors": [{"entries": [{"key": "client", "value": "10.0.3.77"}]}]}`)
	for _, tt := range []struct {
		name string
		line []byte
	}{{"fast", fast}, {"general", general}} {
		b.Run(tt.name, func(b *testing.B) {
			d := newDecoder()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := d.decode(tt.line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("protojson", func(b *testing.B) {
		o := protojson.UnmarshalOptions{DiscardUnknown: true}
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if err := o.Unmarshal(fast, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
