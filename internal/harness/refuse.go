package harness

import (
	"net"
	"slices"
	"sync/atomic"
)

// refuser is the part of a Proxy that makes the server look down: while refusing,
// every connection through the proxy is reset, open ones at once and new ones as
// soon as they are accepted. A real down host's kernel refuses the handshake itself;
// the proxy accepts and resets instead, so that the attempts a client makes on a
// down server can be counted. To the client both are an error on its first use of
// the connection, at once.
type refuser struct {
	refusing atomic.Bool
	arrivals atomic.Int64 // connections accepted, refused ones included
	resets   atomic.Int64 // connections reset as they arrived
}

// RefuseConnections makes the server look down from now on, until
// AcceptConnections: it resets every connection open through the proxy, and every
// new one as soon as it is accepted. The server itself is not touched.
func (p *Proxy) RefuseConnections() {
	p.refusing.Store(true) // before the copy: accept checks again after tracking
	p.mu.Lock()
	conns := slices.Clone(p.conns)
	p.mu.Unlock()
	for _, c := range conns {
		reset(c)
	}
}

// AcceptConnections forwards new connections again after RefuseConnections.
func (p *Proxy) AcceptConnections() { p.refusing.Store(false) }

// Connections returns the connections clients opened to the proxy so far, and how
// many of them it reset as they arrived because it was refusing connections.
func (p *Proxy) Connections() (arrived, refused int64) {
	return p.arrivals.Load(), p.resets.Load()
}

// arrived counts a connection just accepted and reports whether it was refused
// (then it is reset).
func (p *Proxy) arrived(c net.Conn) bool {
	p.arrivals.Add(1)
	return p.refused(c)
}

// refused reports whether the proxy is refusing connections; if it is, it resets c
// and counts it.
func (p *Proxy) refused(c net.Conn) bool {
	if !p.refusing.Load() {
		return false
	}
	p.resets.Add(1)
	reset(c)
	return true
}

// reset closes c so that its peer gets a reset (RST) rather than an orderly end of
// the stream: a refused connection, not a server that hung up.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
