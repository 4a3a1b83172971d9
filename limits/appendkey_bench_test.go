package limits

import "testing"

// BenchmarkAppendKey times AppendKey for an account id of a name with an
// override in the Set's file and of one with none (the Set's other names
// have some), one caller, the key written into a reused buffer.
func BenchmarkAppendKey(b *testing.B) {
	s := setOf(b, setDefaults+"OtherThingsPerAccount: {burst: 7, count: 7, period: 1h}\n", setOverrides)
	buf := make([]byte, 0, 64)
	for _, name := range []string{NewOrdersPerAccount, "OtherThingsPerAccount"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, _, ok, err := s.AppendKey(buf, name, "87654321"); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
