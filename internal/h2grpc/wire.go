package h2grpc

// The gRPC wire details: header blocks, status, metadata and timeout
// encodings, content types, answer buffers.

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// field adds a header field to hbuf; requires wmu held.
func (c *conn) field(name, value string) {
	c.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// statusFields adds stat's grpc-status, grpc-message and details;
// requires wmu held.
func (c *conn) statusFields(stat *status.Status) {
	c.field("grpc-status", strconv.Itoa(int(stat.Code())))
	if msg := stat.Message(); msg != "" {
		c.field("grpc-message", encodeGrpcMessage(msg))
	}
	if p := stat.Proto(); len(p.GetDetails()) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			c.field("grpc-status-details-bin", base64.RawStdEncoding.EncodeToString(b))
		}
	}
}

// mdFields adds the metadata the call set, reserved names left out;
// requires wmu held.
func (c *conn) mdFields(md metadata.MD) {
	for k, vs := range md {
		if reserved(k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			c.field(k, v)
		}
	}
}

// writeBlock writes a header block, in CONTINUATION frames after the
// first when it is larger than the client's frame size; requires wmu
// held.
func (c *conn) writeBlock(id uint32, block []byte, end bool) {
	c.dirty = true
	first := true
	for first || len(block) > 0 {
		n := min(len(block), c.peerFrame)
		frag := block[:n]
		block = block[n:]
		if first {
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0})
			first = false
		} else {
			c.fr.WriteContinuation(id, len(block) == 0, frag)
		}
	}
}

func reserved(name string) bool {
	if name == "" || name[0] == ':' {
		return true
	}
	switch name {
	case "content-type", "user-agent", "grpc-message-type", "grpc-encoding", "grpc-message", "grpc-status", "grpc-timeout", "grpc-status-details-bin", "te":
		return true
	}
	return false
}

// contentSubtype reports the subtype of a gRPC content-type ("" for
// "application/grpc", "proto" for "application/grpc+proto"), and whether
// ct is one.
func contentSubtype(ct string) (string, bool) {
	const base = "application/grpc"
	if !strings.HasPrefix(strings.ToLower(ct), base) {
		return "", false
	}
	rest := ct[len(base):]
	switch {
	case rest == "":
		return "", true
	case rest[0] == '+' || rest[0] == ';':
		return strings.ToLower(rest[1:]), true
	}
	return "", false
}

func contentType(subtype string) string {
	if subtype == "" {
		return "application/grpc"
	}
	return "application/grpc+" + subtype
}

func statusOf(err error) *status.Status {
	if err == nil {
		return status.New(codes.OK, "")
	}
	if s, ok := status.FromError(err); ok {
		return s
	}
	return status.FromContextError(err)
}

// decodeTimeout reads a grpc-timeout value: up to 8 digits and a unit.
func decodeTimeout(s string) (time.Duration, error) {
	if len(s) < 2 || len(s) > 9 {
		return 0, fmt.Errorf("%q: want 1 to 8 digits and a unit", s)
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, fmt.Errorf("%q: unknown unit %q", s, s[len(s)-1:])
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	if n > uint64(math.MaxInt64/unit) {
		return math.MaxInt64, nil
	}
	return time.Duration(n) * unit, nil
}

func decodeBinHeader(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// encodeGrpcMessage percent-encodes a status message: bytes outside
// printable ASCII, and '%'.
func encodeGrpcMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if b := msg[i]; b < ' ' || b > '~' || b == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	var sb strings.Builder
	for i := 0; i < len(msg); i++ {
		if b := msg[i]; b < ' ' || b > '~' || b == '%' {
			fmt.Fprintf(&sb, "%%%02X", b)
		} else {
			sb.WriteByte(b)
		}
	}
	return sb.String()
}

// buffers recycles answers' bytes.
var buffers sync.Pool

func getBuffer(n int) []byte {
	if p, ok := buffers.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n, max(n, 512))
}

func putBuffer(b []byte) {
	if cap(b) > 64<<10 {
		return
	}
	buffers.Put(&b)
}
