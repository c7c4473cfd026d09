package harness

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// roundTrip sends msg through c and reads the echo, returning how long it took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo changed the bytes: %q, want %q", got[:min(len(got), 16)], msg[:min(len(msg), 16)])
	}
	return time.Since(start)
}

// TestProxyLatency checks that SetLatency delays answers by at least the latency,
// keeps the bytes and their order, and that 0 ends the delay for later answers.
func TestProxyLatency(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, []byte("warm"))
	p.SetLatency(80 * time.Millisecond)
	for i := range 3 {
		if took := roundTrip(t, c, bytes.Repeat([]byte{byte('a' + i)}, 100<<10)); took < 80*time.Millisecond {
			t.Fatalf("round trip %d with 80ms of latency took %v", i, took)
		}
	}
	p.SetLatency(0)
	// Only a lower bound can be asserted on a loaded machine; the delay must be gone
	// from answers read after it ended, which a one-second bound shows without
	// depending on the machine's speed.
	if took := roundTrip(t, c, []byte("fast")); took > time.Second {
		t.Fatalf("round trip after the latency ended took %v", took)
	}
	// A latency that falls applies to answers already queued: a stalled broker
	// catches up.
	// The check is causal, not timed: the answer must not arrive before the release
	// (a timer armed before the round trip's own clock starts may fire a little
	// under 100ms after it).
	p.SetLatency(time.Hour)
	var released atomic.Bool
	time.AfterFunc(100*time.Millisecond, func() { released.Store(true); p.SetLatency(0) })
	took := roundTrip(t, c, []byte("queued"))
	if !released.Load() {
		t.Fatalf("an answer queued under an hour's latency arrived after %v, before the latency was lifted", took)
	}
	if took > 10*time.Second {
		t.Fatalf("an answer queued under an hour's latency, released after 100ms, took %v", took)
	}
}

// TestProxyRate checks that SetRate bounds the bytes per second through the proxy
// (both directions together) without losing or reordering any, and that 0 lifts it.
func TestProxyRate(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.SetRate(40 << 10) // 40 KiB/s; 8 KiB each way is 16 KiB: at least 0.4s
	msg := make([]byte, 8<<10)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if took := roundTrip(t, c, msg); took < 350*time.Millisecond {
		t.Fatalf("16 KiB through a 40 KiB/s link took %v", took)
	}
	p.SetRate(0)
	if took := roundTrip(t, c, msg); took > time.Second {
		t.Fatalf("8 KiB each way after the bound was lifted took %v", took)
	}
}
