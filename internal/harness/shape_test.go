package harness

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// shapeGiveUp bounds a round trip: far above any machine's round trip, however
// loaded, and far below the hour's latency or the 1 B/s rate that a lifted bound
// which did not lift would leave.
const shapeGiveUp = 10 * time.Second

// roundTrip sends msg through c and reads the echo, returning how long it took; the
// test fails if that takes shapeGiveUp.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if err := c.SetDeadline(start.Add(shapeGiveUp)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("round trip of %d bytes: %v", len(msg), err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("round trip of %d bytes: %v after %v", len(msg), err, time.Since(start))
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
	// Only a lower bound can be asserted on a loaded machine. That 0 ends the delay
	// for later answers shows without a tight bound after an hour's latency: the
	// round trip either comes back (within shapeGiveUp) or fails the test.
	p.SetLatency(time.Hour)
	p.SetLatency(0)
	roundTrip(t, c, []byte("fast"))
	// A latency that falls applies to answers already queued: a stalled broker
	// catches up.
	// The check is causal, not timed: the answer must not arrive before the release
	// (a timer armed before the round trip's own clock starts may fire a little
	// under 100ms after it).
	p.SetLatency(time.Hour)
	var released atomic.Bool
	time.AfterFunc(100*time.Millisecond, func() { released.Store(true); p.SetLatency(0) })
	took := roundTrip(t, c, []byte("queued")) // fails the test if the answer stays queued
	if !released.Load() {
		t.Fatalf("an answer queued under an hour's latency arrived after %v, before the latency was lifted", took)
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
	// That 0 lifts the bound shows without a tight bound after a rate of 1 B/s (16 KiB
	// would take hours): the round trip comes back within shapeGiveUp or fails the test.
	p.SetRate(1)
	p.SetRate(0)
	roundTrip(t, c, msg)
}
