package harness

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// readErr returns the error that reading c ends in, within 10s. A refused
// connection must end in a reset: an orderly end of the stream, or silence, is not a
// refusal.
func readErr(c net.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err
}

// TestProxyRefuseConnections: refusing resets the open connections and every new one,
// counts the new ones, and AcceptConnections forwards again.
func TestProxyRefuseConnections(t *testing.T) {
	p, dial, before := echoProxy(t)
	p.RefuseConnections()
	if err := readErr(before); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a connection open when the proxy began refusing: read got %v, want a reset", err)
	}
	const attempts = 5
	for i := range attempts {
		// The reset may come before the dial returns, or on the first read.
		c, err := net.Dial("tcp", p.Addr())
		if err == nil {
			err = readErr(c)
			c.Close()
		}
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection %d while refusing: got %v, want a reset", i, err)
		}
	}
	arrived, refused := p.Connections()
	if arrived != 1+attempts || refused != attempts {
		t.Errorf("Connections() = %d arrived, %d refused; want %d, %d", arrived, refused, 1+attempts, attempts)
	}
	p.AcceptConnections()
	if !echoes(t, dial()) {
		t.Error("no echo after AcceptConnections")
	}
	if _, refused := p.Connections(); refused != attempts {
		t.Errorf("a connection after AcceptConnections was counted as refused (%d)", refused)
	}
}
