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

// echoes reports whether a line sent on c comes back within 300ms.
func echoes(t *testing.T, c net.Conn) bool {
	t.Helper()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "ping\n"
}

// TestProxyBlackHoleThenForward: a black hole hangs open and new connections; after
// Forward (to another server) new connections work and the hung ones stay hung.
func TestProxyBlackHoleThenForward(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	before := dial()
	if !echoes(t, before) {
		t.Fatal("no echo through the proxy")
	}
	p.BlackHole()
	during := dial()
	if echoes(t, before) || echoes(t, during) {
		t.Fatal("an answer through the black hole")
	}
	p.Forward(echoServer(t))
	if !echoes(t, dial()) {
		t.Error("a new connection after Forward gets no answer")
	}
	if echoes(t, before) || echoes(t, during) {
		t.Error("a connection hung before Forward answers again")
	}
}
