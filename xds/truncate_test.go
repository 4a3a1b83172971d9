package xds

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateKeepsValidUTF8(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{name: "a short message is kept", in: "bad unit", n: 10, want: "bad unit"},
		{name: "a long message is cut and marked", in: "abcdef", n: 3, want: "abc …(truncated)"},
		{name: "a cut inside a character drops its bytes", in: "ab€", n: 3, want: "ab …(truncated)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := truncate(tt.in, tt.n)
			if got != tt.want || !utf8.ValidString(got) {
				t.Errorf("truncate(%q, %d): got %q, want %q", tt.in, tt.n, got, tt.want)
			}
			if strings.Contains(got, "\uFFFD") {
				t.Errorf("got a replacement character in %q", got)
			}
		})
	}
}
