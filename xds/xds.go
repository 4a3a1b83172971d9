// Package xds takes the Envoy descriptor configuration from an xDS
// management server instead of files, as envoyproxy/ratelimit does with
// CONFIG_TYPE=GRPC_XDS_SOTW and as Envoy Gateway serves it.
//
// A Client opens an Aggregated Discovery Service stream (State of the
// World) and subscribes to every resource of type
// ratelimit.config.ratelimit.v3.RateLimitConfig for its node. Each
// response carries the whole configuration: one resource per domain. The
// Client turns the resources into a [descriptors.Config] with the checks a
// configuration file gets, ACKs a valid one and hands it to its Apply
// callback, and NACKs an invalid one with the reason, keeping the last
// good configuration. When the stream breaks it opens a new one after an
// exponential backoff; meanwhile the last good configuration stays in
// force.
package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/window"
)

// TypeURL is the type of the resources a Client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Options configure a Client. Server and Apply are required; every other
// field has a default.
type Options struct {
	// Server is the management server's gRPC target, "host:port".
	Server string
	// NodeID identifies this service to the server, which keys its
	// snapshots by it; default "default".
	NodeID string
	// NodeMetadata is sent as the node's metadata, each value a string.
	NodeMetadata map[string]string
	// Headers are added to the stream's gRPC metadata (for authorization,
	// say).
	Headers map[string]string
	// Credentials secure the connection; nil: plaintext.
	Credentials credentials.TransportCredentials
	// MaxRecvMsgSize bounds a response in bytes; 0: gRPC's default, 4 MiB.
	MaxRecvMsgSize int
	// ConnectRetry is how often the connection is dialled again, in the
	// background, while the server cannot be reached; default 3s. A stream
	// opened while the connection is down fails at once, with the reason
	// logged, and is tried again after the backoff.
	ConnectRetry time.Duration
	// BackoffInitial is the wait before opening a new stream after one
	// breaks; it doubles after every stream that broke without a response,
	// up to BackoffMax, and each wait is shortened by a random part of up
	// to half (jitter). Defaults 10s and 60s.
	BackoffInitial, BackoffMax time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Apply receives every configuration the server sends that is valid,
	// with the response's version, before the Client ACKs it. It is called
	// from the Client's goroutine, one call at a time, and SHOULD return
	// quickly: the stream waits for it.
	Apply func(cfg *descriptors.Config, version string)
	// Reject, when set, is told about every response the Client NACKs,
	// with the response's version and why.
	Reject func(version string, err error)
}

// Client receives descriptor configuration from an xDS management server.
// Create it with New and call Run once: Run closes the connection when it
// returns.
type Client struct {
	opts Options
	log  *slog.Logger
	node *corev3.Node
	conn *grpc.ClientConn

	// Only Run's goroutine touches these.
	version  string // last accepted version
	rejected string // last rejected version, "" after an accepted one
	repeats  int    // times in a row the server sent rejected again
}

// New checks o and prepares a Client. It does not connect: Run does.
func New(o Options) (*Client, error) {
	if o.Server == "" {
		return nil, errors.New("xds: no server address")
	}
	if o.Apply == nil {
		return nil, errors.New("xds: no Apply callback")
	}
	if o.NodeID == "" {
		o.NodeID = "default"
	}
	if o.ConnectRetry <= 0 {
		o.ConnectRetry = 3 * time.Second
	}
	if o.BackoffInitial <= 0 {
		o.BackoffInitial = 10 * time.Second
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 60 * time.Second
	}
	if o.BackoffMax < o.BackoffInitial {
		return nil, fmt.Errorf("xds: backoff max %s is less than backoff initial %s", o.BackoffMax, o.BackoffInitial)
	}
	if o.MaxRecvMsgSize < 0 {
		return nil, fmt.Errorf("xds: max receive message size %d is negative", o.MaxRecvMsgSize)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	fields := make(map[string]*structpb.Value, len(o.NodeMetadata))
	for k, v := range o.NodeMetadata {
		fields[k] = structpb.NewStringValue(v)
	}
	creds := o.Credentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: o.ConnectRetry, Multiplier: 1, Jitter: 0.2, MaxDelay: o.ConnectRetry},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if o.MaxRecvMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(o.Server, dial...)
	if err != nil {
		return nil, fmt.Errorf("xds: server %q: %w", o.Server, err)
	}
	return &Client{
		opts: o,
		log:  log.With("xds_server", o.Server),
		node: &corev3.Node{Id: o.NodeID, Metadata: &structpb.Struct{Fields: fields}},
		conn: conn,
	}, nil
}

// Run keeps a stream to the server open until ctx ends, then closes the
// connection and returns ctx's error. A broken stream is opened again
// after the backoff; the last configuration applied stays in force.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	if len(c.opts.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.opts.Headers))
	}
	c.log.Info("xDS client started", "node_id", c.opts.NodeID)
	failures := 0
	for {
		got, err := c.stream(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if got {
			failures = 0
		}
		wait := c.backoff(failures)
		failures++
		c.log.Warn("xDS stream ended; keeping the last configuration", "err", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// sleep waits for d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// backoff is the wait after the n+1th stream in a row that broke without
// a response: BackoffInitial doubled n times, at most BackoffMax, less a
// random part of up to half.
func (c *Client) backoff(n int) time.Duration {
	d := c.opts.BackoffInitial
	for range n {
		if d >= c.opts.BackoffMax/2 {
			d = c.opts.BackoffMax
			break
		}
		d *= 2
	}
	d = min(d, c.opts.BackoffMax)
	return d - time.Duration(rand.Int64N(int64(d/2)+1))
}

// stream runs one ADS stream until it breaks. got says whether the server
// sent at least one response.
func (c *Client) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.version}); err != nil {
		return false, fmt.Errorf("send subscription: %w", err)
	}
	c.log.Info("xDS stream open", "version", c.version)
	for {
		resp, err := s.Recv()
		if err != nil {
			return got, fmt.Errorf("receive: %w", err)
		}
		got = true
		req := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		cfg, err := c.decode(resp)
		if err != nil {
			req.VersionInfo = c.version
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: truncate(err.Error(), 4096)}
			if !c.reject(ctx, resp.GetVersionInfo(), err) {
				return got, ctx.Err()
			}
		} else {
			c.opts.Apply(cfg, resp.GetVersionInfo())
			c.version, c.rejected, c.repeats = resp.GetVersionInfo(), "", 0
			req.VersionInfo = c.version
			c.log.Info("xDS configuration applied", "version", c.version, "domains", len(cfg.Domains()))
		}
		if err := s.Send(req); err != nil {
			if errors.Is(err, io.EOF) { // the stream ended; Recv tells why
				_, err = s.Recv()
			}
			return got, fmt.Errorf("send ACK/NACK: %w", err)
		}
	}
}

// reject reports a refused version, once per version in a row. A server
// that sends the version it was just refused again (go-control-plane's
// snapshot cache answers every NACK so) gets its NACK after the backoff,
// so that the two do not spin. It reports false when ctx ended while
// waiting.
func (c *Client) reject(ctx context.Context, version string, err error) bool {
	if version != c.rejected {
		c.rejected, c.repeats = version, 0
		c.log.Error("xDS configuration rejected; keeping the last configuration", "version", version, "err", err)
		if c.opts.Reject != nil {
			c.opts.Reject(version, err)
		}
		return true
	}
	wait := c.backoff(c.repeats)
	c.repeats++
	c.log.Debug("xDS server sent a rejected configuration again", "version", version, "nack_in", wait)
	return sleep(ctx, wait)
}

// decode checks a response's type and builds its configuration.
func (c *Client) decode(resp *discoveryv3.DiscoveryResponse) (*descriptors.Config, error) {
	if resp.GetTypeUrl() != TypeURL {
		return nil, fmt.Errorf("response of type %q, subscribed to %q", resp.GetTypeUrl(), TypeURL)
	}
	return Config(resp.GetResources())
}

// truncate shortens s to at most n bytes, marking the cut, and keeps it
// valid UTF-8 as a proto3 string must be.
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n] + " …(truncated)"
	}
	return strings.ToValidUTF8(s, "")
}

// Config builds a configuration from RateLimitConfig resources, one domain
// each, with the checks of descriptors.Build and descriptors.New (domains
// must be unique). Every problem is reported; none is ignored.
func Config(resources []*anypb.Any) (*descriptors.Config, error) {
	var (
		domains []*descriptors.Domain
		errs    []error
		owner   = make(map[string]string) // domain → name of the resource that holds it
	)
	for i, res := range resources {
		if res.GetTypeUrl() != TypeURL {
			errs = append(errs, fmt.Errorf("resource %d has type %q, want %q", i, res.GetTypeUrl(), TypeURL))
			continue
		}
		var rc rlsconfv3.RateLimitConfig
		if err := res.UnmarshalTo(&rc); err != nil {
			errs = append(errs, fmt.Errorf("resource %d: %w", i, err))
			continue
		}
		d, err := Domain(&rc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, ok := owner[d.Name()]; ok {
			errs = append(errs, fmt.Errorf("RateLimitConfig %q: duplicate domain %q, already in RateLimitConfig %q", rc.GetName(), d.Name(), prev))
			continue
		}
		owner[d.Name()] = rc.GetName()
		domains = append(domains, d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return descriptors.New(domains...)
}

// Domain builds the domain of one RateLimitConfig resource, as
// envoyproxy/ratelimit reads it: the resource's domain and descriptors
// with their key, value, rate_limit (unit, requests_per_unit, unlimited,
// name, replaces), shadow_mode, detailed_metric, quota_mode and metadata
// (returned in the dynamic metadata, as from a file). Errors name the
// resource ("RateLimitConfig \"name\"") and the path of the bad field.
func Domain(rc *rlsconfv3.RateLimitConfig) (*descriptors.Domain, error) {
	return descriptors.Build(fmt.Sprintf("RateLimitConfig %q", rc.GetName()), rc.GetDomain(), nodes(rc.GetDescriptors()))
}

func nodes(in []*rlsconfv3.RateLimitDescriptor) []descriptors.Node {
	if len(in) == 0 {
		return nil
	}
	out := make([]descriptors.Node, len(in))
	for i, d := range in {
		out[i] = descriptors.Node{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      rateLimit(d.GetRateLimit()),
			Descriptors:    nodes(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			QuotaMode:      d.GetQuotaMode(),
			DetailedMetric: d.GetDetailedMetric(),
			Metadata:       d.GetMetadata().AsMap(),
		}
	}
	return out
}

func rateLimit(p *rlsconfv3.RateLimitPolicy) *descriptors.RateLimit {
	if p == nil {
		return nil
	}
	r := &descriptors.RateLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
	if p.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
		// The enum's names are the units'; a number the enum does not
		// know stays a number and is refused as an unknown unit.
		r.Unit = strings.ToLower(p.GetUnit().String())
		if _, err := window.ParseUnit(r.Unit); err != nil {
			r.Unit = fmt.Sprintf("unit(%d)", int32(p.GetUnit()))
		}
	}
	for _, rep := range p.GetReplaces() {
		r.Replaces = append(r.Replaces, rep.GetName())
	}
	return r
}

// ParseNodeMetadata reads node metadata written "k1=v1,k2=v2", as
// envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_METADATA; "k1:v1" is read
// too when the entry has no "=". Spaces around keys and values are
// trimmed and empty entries skipped; an entry without either separator,
// or with an empty key, is an error naming it.
func ParseNodeMetadata(s string) (map[string]string, error) {
	return parsePairs(s, "=:")
}

// ParseHeaders reads gRPC headers written "k1:v1,k2:v2", as
// envoyproxy/ratelimit's CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS.
func ParseHeaders(s string) (map[string]string, error) {
	return parsePairs(s, ":")
}

// parsePairs splits s at commas, then each entry at the first of seps
// (in order of preference) that it contains.
func parsePairs(s, seps string) (map[string]string, error) {
	out := make(map[string]string)
	for _, entry := range strings.Split(s, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		i := -1
		for _, sep := range seps {
			if i = strings.IndexRune(entry, sep); i >= 0 {
				break
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("entry %q has no %q between key and value", entry, seps[:1])
		}
		k, v := strings.TrimSpace(entry[:i]), strings.TrimSpace(entry[i+1:])
		if k == "" {
			return nil, fmt.Errorf("entry %q has an empty key", entry)
		}
		out[k] = v
	}
	return out, nil
}
