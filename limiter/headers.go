package limiter

import "time"

// RetryAfter is the value of a Retry-After header (and of the "t" of a
// RateLimit header) for a wait of d: whole seconds, rounded up, at least 1.
// Every front door that answers "too many requests" over HTTP uses it.
func RetryAfter(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// ResetSeconds is the value of a RateLimit-Reset header for a window that
// ends in d: whole seconds, rounded down, as envoyproxy/ratelimit reports
// duration_until_reset.
func ResetSeconds(d time.Duration) int64 {
	return int64(d / time.Second)
}
