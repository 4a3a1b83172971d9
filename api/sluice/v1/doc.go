// Package sluicev1 is the generated Go code for Sluice's key-value limits
// API, sluice.v1.Limits (limits.proto): Check, Spend, Refund, Reset and
// Batch over Boulder-style limits. The server is server.KV; a Go client is
// in package client. It also holds sluice.v1.Descriptors
// (descriptors.proto), served by server.Descriptors on the admin listener:
// Inspect and Reset the counter of an Envoy descriptor. Regenerate with
// `make proto`.
package sluicev1
