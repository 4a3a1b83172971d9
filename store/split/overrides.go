package split

import "github.com/sluice-rl/sluice/store"

// The runtime overrides live in the main store, beside its GCRA buckets,
// never in the per-second one (store.ForwardOverrides, embedded in Store).
var _ store.OverrideStore = (*Store)(nil)
