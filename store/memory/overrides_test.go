package memory_test

import (
	"testing"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The memory store keeps runtime overrides for the life of the Store
// (and so of the process): no reopen scenario.
func TestOverrides(t *testing.T) {
	t.Parallel()
	storetest.RunOverrides(t, func(t *testing.T) store.OverrideStore { return memory.New(memory.Options{}) }, nil)
}
