package harness

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line it reads with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// echoes reports whether a line sent on c comes back within 10s: an answer that
// must come is given all the time a loaded machine may need.
func echoes(t *testing.T, c net.Conn) bool {
	t.Helper()
	return echoWithin(c, 10*time.Second)
}

// echoSilent reports whether a line sent on c does not come back within 300ms.
// Silence cannot be proved by waiting; a short wait is enough for a proxy that
// forwards at once, and a slow machine can only make the check pass, never fail.
func echoSilent(t *testing.T, c net.Conn) bool {
	t.Helper()
	return !echoWithin(c, 300*time.Millisecond)
}

func echoWithin(c net.Conn, within time.Duration) bool {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "ping\n"
}

// echoProxy returns a proxy to an echo server, a dial through it (the test closes
// the connections when it ends), and a first connection that has echoed.
func echoProxy(t *testing.T) (p *Proxy, dial func() net.Conn, first net.Conn) {
	t.Helper()
	p = NewProxy(t, echoServer(t))
	dial = func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first = dial()
	if !echoes(t, first) {
		t.Fatal("no echo through the proxy")
	}
	return p, dial, first
}

// TestProxyBlackHoleThenForward: a black hole hangs open and new connections; after
// Forward (to another server) new connections work and the hung ones stay hung.
func TestProxyBlackHoleThenForward(t *testing.T) {
	p, dial, before := echoProxy(t)
	p.BlackHole()
	during := dial()
	if !echoSilent(t, before) || !echoSilent(t, during) {
		t.Fatal("an answer through the black hole")
	}
	p.Forward(echoServer(t))
	if !echoes(t, dial()) {
		t.Error("a new connection after Forward gets no answer")
	}
	if !echoSilent(t, before) || !echoSilent(t, during) {
		t.Error("a connection hung before Forward answers again")
	}
}
