package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: sluice <command> [flags]

commands:
  serve     run the rate-limit service
  proxy     run the adaptive reverse proxy
  check     validate configuration files
  limits    show which key-value limit applies to an id (limits show ID)
  bench     measure decisions per second
  query     ask a rate limit service once and print its answer
  replay    run a request log through a descriptor config, per rule
  version   print the version

"sluice <command> --help" lists a command's flags. Every flag of serve and
proxy also reads an environment variable, SLUICE_ and the flag's name in
capitals (--grpc-addr is SLUICE_GRPC_ADDR); serve also reads
envoyproxy/ratelimit's variables (REDIS_URL, RUNTIME_ROOT, ...). A flag
wins over its SLUICE_ variable, which wins over envoyproxy/ratelimit's.

Docs: README.md, docs/configuration.md (every flag and variable),
docs/envoy.md, docs/replay.md, docs/limits.md, docs/adaptive.md, docs/redis.md.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "sluice %s %s\n", version, goVersion())
		return 0
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "proxy":
		return proxy(args[1:], stdout, stderr)
	case "bench":
		return benchCmd(args[1:], stdout, stderr)
	case "query":
		return query(args[1:], stdout, stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "limits":
		return limitsCmd(args[1:], stdout, stderr)
	case "replay":
		return replayCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return ""
}
