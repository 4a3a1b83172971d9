// Command sluice is the Sluice rate-limit service: an Envoy-compatible
// rate-limit server, a key-value limits API, and an adaptive HTTP proxy.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
