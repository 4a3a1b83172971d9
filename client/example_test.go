package client_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

const defaultsYAML = `
NewRegistrationsPerIPAddress:
  burst: 20
  count: 20
  period: 1s
NewOrdersPerAccount:
  burst: 300
  count: 300
  period: 180m
`

const overridesYAML = `
- NewOrdersPerAccount:
    burst: 300
    count: 600
    period: 180m
    ids:
      - 12345678
`

// startSluice runs the key-value API in-process on a loopback port, with
// the limits above, an in-memory store and a clock that stands still (so
// the output below is exact), and returns its address and a stop function.
// A real program dials `sluice serve`'s gRPC port instead.
func startSluice() (addr string, stop func()) {
	defaults, err := limits.ParseDefaults("defaults.yaml", []byte(defaultsYAML))
	if err != nil {
		log.Fatal(err)
	}
	overrides, err := limits.ParseOverrides("overrides.yaml", []byte(overridesYAML))
	if err != nil {
		log.Fatal(err)
	}
	set, err := limits.New(defaults, overrides)
	if err != nil {
		log.Fatal(err)
	}
	kv := server.NewKV(server.KVOptions{
		Limiter: limiter.New(memory.New(memory.Options{}), clock.NewFake(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))),
		Limits:  func() *limits.Set { return set },
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	sluicev1.RegisterLimitsServer(srv, kv)
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String(), srv.Stop
}

func Example() {
	addr, stop := startSluice()
	defer stop()

	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// 20 new registrations per second from one IP address, in a burst of 20.
	for i := 1; i <= 21; i++ {
		d, err := c.Spend(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1", 1)
		if err != nil {
			log.Fatal(err)
		}
		if i == 1 || i >= 20 {
			fmt.Printf("request %d: allowed %v, %d left, retry in %s\n", i, d.Allowed, d.Remaining, d.RetryIn)
		}
	}
	// Output:
	// request 1: allowed true, 19 left, retry in 0s
	// request 20: allowed true, 0 left, retry in 50ms
	// request 21: allowed false, 0 left, retry in 50ms
}

func ExampleClient_Spend() {
	addr, stop := startSluice()
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, account := range []string{"12345678", "555"} {
		d, err := c.Spend(context.Background(), "NewOrdersPerAccount", account, 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: allowed %v, %d left, full again in %s; limit %d per %s (%s), bucket %s\n",
			account, d.Allowed, d.Remaining, d.ResetIn, d.Limit.Count, d.Limit.Period, d.Limit.Source, d.Bucket)
	}
	// Output:
	// 12345678: allowed true, 299 left, full again in 18s; limit 600 per 3h0m0s (override), bucket 3:12345678
	// 555: allowed true, 299 left, full again in 36s; limit 300 per 3h0m0s (default), bucket 3:555
}

func ExampleClient_Check() {
	addr, stop := startSluice()
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	if _, err := c.Spend(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1", 5); err != nil {
		log.Fatal(err)
	}
	// A check with cost 0 peeks at the bucket; no check ever spends.
	peek, _ := c.Check(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1", 0)
	big, _ := c.Check(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1", 16)
	fmt.Printf("peek: %d left\n", peek.Remaining)
	fmt.Printf("16 more: allowed %v, retry in %s\n", big.Allowed, big.RetryIn)
	// Output:
	// peek: 15 left
	// 16 more: allowed false, retry in 50ms
}

func ExampleClient_Refund() {
	addr, stop := startSluice()
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// Spend 3 tokens for an order, then give 2 back when the order turns
	// out to need only one; a refund never fills the bucket past full.
	if _, err := c.Spend(ctx, "NewOrdersPerAccount", "555", 3); err != nil {
		log.Fatal(err)
	}
	d, _ := c.Refund(ctx, "NewOrdersPerAccount", "555", 2)
	fmt.Printf("refunded: %v, %d left\n", d.Allowed, d.Remaining)
	d, _ = c.Refund(ctx, "NewOrdersPerAccount", "555", 5)
	fmt.Printf("refunded: %v, %d left\n", d.Allowed, d.Remaining)
	d, _ = c.Refund(ctx, "NewOrdersPerAccount", "555", 1)
	fmt.Printf("refunded: %v, %d left\n", d.Allowed, d.Remaining)
	// Output:
	// refunded: true, 299 left
	// refunded: true, 300 left
	// refunded: false, 300 left
}

func ExampleClient_Reset() {
	addr, stop := startSluice()
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	_, _ = c.Spend(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1", 20)
	d, _ := c.Reset(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1")
	fmt.Printf("after reset: %d left\n", d.Remaining)
	// Output:
	// after reset: 20 left
}

func ExampleClient_Batch() {
	addr, stop := startSluice()
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// Use up the IP address's burst; then a batch that also needs it is
	// denied as a whole, and the account's token is not spent either.
	_, _ = c.Spend(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1", 20)
	d, each, err := c.Batch(ctx,
		client.Transaction{Name: "NewOrdersPerAccount", ID: "555", Cost: 1},
		client.Transaction{Name: "NewRegistrationsPerIPAddress", ID: "10.0.0.1", Cost: 1},
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("batch: allowed %v because of %s, retry in %s\n", d.Allowed, d.Bucket, d.RetryIn)
	for _, e := range each {
		fmt.Printf("  %s: allowed %v\n", e.Bucket, e.Allowed)
	}
	peek, _ := c.Check(ctx, "NewOrdersPerAccount", "555", 0)
	fmt.Printf("account still has %d\n", peek.Remaining)
	// Output:
	// batch: allowed false because of 1:10.0.0.1, retry in 50ms
	//   3:555: allowed true
	//   1:10.0.0.1: allowed false
	// account still has 300
}

func ExampleIsInvalid() {
	addr, stop := startSluice()
	defer stop()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Spend(context.Background(), "NewOrdersPerAccount", "not-a-number", 1)
	fmt.Println(client.IsInvalid(err))
	// Output:
	// true
}
