// Package sluicev1 is the generated Go code for Sluice's key-value limits
// API, sluice.v1.Limits (limits.proto): Check, Spend, Refund, Reset and
// Batch over Boulder-style limits. The server is server.KV; a Go client is
// in package client. Regenerate with `make proto`.
package sluicev1
