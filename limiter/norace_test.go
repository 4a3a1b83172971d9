//go:build !race

package limiter_test

const raceEnabled = false
