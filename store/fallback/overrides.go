package fallback

import "github.com/sluice-rl/sluice/store"

// The runtime overrides live in the primary only (store.ForwardOverrides,
// embedded in Store): the local fallback never holds them, whatever the
// policy.
var _ store.OverrideStore = (*Store)(nil)
