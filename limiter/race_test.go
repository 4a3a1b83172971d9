//go:build race

package limiter_test

const raceEnabled = true
