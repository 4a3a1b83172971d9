package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Exit codes of sluice query: 0 when the overall answer is OK,
// exitOverLimit when it is OVER_LIMIT, 1 for any error (a bad argument,
// an unreachable server, a failed call, an UNKNOWN answer).
const exitOverLimit = 3

const queryUsage = `usage: sluice query [flags] DESCRIPTOR...

Asks a rate limit service (envoy.service.ratelimit.v3 ShouldRateLimit) once
and prints its answer. Each DESCRIPTOR is one descriptor, its entries
separated by commas: key=value[,key=value...] (the value may be empty and
may contain "="; it cannot contain ",").

Exit status: 0 OK, 3 OVER_LIMIT, 1 error.

flags:
`

// query is a one-shot RLS client, like envoyproxy/ratelimit's client_cmd.
func query(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice query", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, queryUsage)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:8081", "the service's gRPC address, host:port")
	domain := fs.String("domain", "", "the rate limit domain (required)")
	hits := fs.Uint("hits-addend", 1, "hits the call adds to every descriptor; 0 only reads the counters")
	limit := fs.String("limit", "", "a limit sent with every descriptor, replacing the configured one: N/UNIT (10/minute)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer, connecting included")
	asJSON := fs.Bool("json", false, "print the RateLimitResponse as protojson")
	useTLS := fs.Bool("tls", false, "connect with TLS, verifying the server with the system's roots (implied by the other --tls-* flags)")
	tlsCA := fs.String("tls-ca", "", "PEM file of the CA that signed the server's certificate")
	tlsCert := fs.String("tls-cert", "", "PEM client certificate, for a server that requires one (with --tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM key of --tls-cert")
	tlsServerName := fs.String("tls-server-name", "", "the name the server's certificate must carry (default: the host of --addr)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 1
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice query: "+format+"\n", a...)
		return 1
	}
	if *domain == "" {
		return fail("--domain is required")
	}
	if fs.NArg() == 0 {
		return fail("no descriptor: give at least one key=value[,key=value...] argument")
	}
	if *timeout <= 0 {
		return fail("--timeout %s: must be more than 0", *timeout)
	}
	if *hits > math.MaxUint32 {
		return fail("--hits-addend %d is too large, must be at most %d", *hits, uint32(math.MaxUint32))
	}
	var override *rlcommon.RateLimitDescriptor_RateLimitOverride
	if *limit != "" {
		o, err := parseLimitOverride(*limit)
		if err != nil {
			return fail("--limit %q: %v", *limit, err)
		}
		override = o
	}
	req := &rlsv3.RateLimitRequest{Domain: *domain, HitsAddend: uint32(*hits)}
	for i, arg := range fs.Args() {
		d, err := parseDescriptor(arg)
		if err != nil {
			return fail("descriptor %d %q: %v", i+1, arg, err)
		}
		if *hits == 0 {
			// The request's 0 means 1 to the service; a descriptor's
			// explicit 0 reads without counting.
			d.HitsAddend = wrapperspb.UInt64(0)
		}
		d.Limit = override
		req.Descriptors = append(req.Descriptors, d)
	}

	creds := insecure.NewCredentials()
	if *useTLS || *tlsCA != "" || *tlsCert != "" || *tlsKey != "" || *tlsServerName != "" {
		cfg, err := queryTLS(*tlsCA, *tlsCert, *tlsKey, *tlsServerName)
		if err != nil {
			return fail("%v", err)
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fail("--addr %q: %v", *addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.Unavailable:
			return fail("cannot reach %s: %s", *addr, st.Message())
		case codes.DeadlineExceeded:
			return fail("no answer from %s within --timeout %s: %s", *addr, *timeout, st.Message())
		}
		return fail("%s answered %s: %s", *addr, st.Code(), st.Message())
	}
	if *asJSON {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(resp)
		if err != nil {
			return fail("encode the answer: %v", err)
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printResponse(stdout, req, resp)
	}
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		return 0
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return exitOverLimit
	}
	return fail("%s answered overall code %s", *addr, resp.GetOverallCode())
}

// parseDescriptor reads key=value[,key=value...].
func parseDescriptor(arg string) (*rlcommon.RateLimitDescriptor, error) {
	d := &rlcommon.RateLimitDescriptor{}
	for j, pair := range strings.Split(arg, ",") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("entry %d %q has no \"=\", want key=value", j+1, pair)
		}
		if key == "" {
			return nil, fmt.Errorf("entry %d %q has an empty key", j+1, pair)
		}
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: key, Value: value})
	}
	return d, nil
}

// parseLimitOverride reads N/UNIT, UNIT one of second … year in any case.
func parseLimitOverride(s string) (*rlcommon.RateLimitDescriptor_RateLimitOverride, error) {
	n, unit, ok := strings.Cut(s, "/")
	if !ok {
		return nil, errors.New("want N/UNIT, such as 10/minute")
	}
	rpu, err := strconv.ParseUint(n, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("requests %q: want a whole number from 0 to %d", n, uint32(math.MaxUint32))
	}
	u, ok := typev3.RateLimitUnit_value[strings.ToUpper(unit)]
	if !ok || u == int32(typev3.RateLimitUnit_UNKNOWN) {
		return nil, fmt.Errorf("unit %q: want second, minute, hour, day, week, month or year", unit)
	}
	return &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(rpu), Unit: typev3.RateLimitUnit(u)}, nil
}

// queryTLS builds the client's TLS configuration from PEM files.
func queryTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// printResponse writes the answer for people: the overall code, then a
// line per descriptor, then the headers the service asks Envoy to add.
func printResponse(w io.Writer, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) {
	fmt.Fprintln(w, resp.GetOverallCode())
	for i, st := range resp.GetStatuses() {
		var b strings.Builder
		fmt.Fprintf(&b, "  %d ", i+1)
		if i < len(req.GetDescriptors()) {
			for j, e := range req.Descriptors[i].GetEntries() {
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%s=%s", e.GetKey(), e.GetValue())
			}
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s", st.GetCode())
		if l := st.GetCurrentLimit(); l != nil {
			unit := strings.ToLower(l.GetUnit().String())
			if m := l.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
				unit = fmt.Sprintf("%d %ss", m.GetValue(), unit)
			}
			fmt.Fprintf(&b, " limit=%d/%s", l.GetRequestsPerUnit(), unit)
			if l.GetName() != "" {
				fmt.Fprintf(&b, " name=%s", l.GetName())
			}
			fmt.Fprintf(&b, " remaining=%d", st.GetLimitRemaining())
			if r := st.GetDurationUntilReset(); r != nil {
				fmt.Fprintf(&b, " reset=%s", r.AsDuration())
			}
		} else if st.GetLimitRemaining() == math.MaxUint32 {
			b.WriteString(" unlimited")
		} else {
			b.WriteString(" no limit")
		}
		fmt.Fprintln(w, b.String())
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		fmt.Fprintf(w, "response header %s: %s\n", h.GetKey(), h.GetValue())
	}
	for _, h := range resp.GetRequestHeadersToAdd() {
		fmt.Fprintf(w, "request header %s: %s\n", h.GetKey(), h.GetValue())
	}
}
