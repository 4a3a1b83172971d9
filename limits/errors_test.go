package limits_test

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/limits"
)

func TestMessagesNeverEchoAHugeID(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 1<<20)
	for _, tc := range []struct{ name, id string }{
		{limits.NewOrdersPerAccount, huge},
		{huge, "1"},
	} {
		set, err := limits.New(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = set.Resolve(tc.name, tc.id)
		if err == nil {
			t.Fatal("got no error, want one")
		}
		if len(err.Error()) > 2*limits.MaxQuoted+300 || !strings.Contains(err.Error(), "(1048576 bytes)") {
			t.Errorf("got a message of %d bytes (%.80s…), want it short, with the length", len(err.Error()), err.Error())
		}
	}
	if got, want := limits.Quote("short"), `"short"`; got != want {
		t.Errorf("Quote(short): got %s, want %s", got, want)
	}
}
