package harness

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a server and can make the server look hung
// without touching it, which matters for servers other tests share:
//
//   - Hold stops forwarding what the server sends (requests still reach it) until
//     Resume: late answers.
//   - BlackHole makes the proxy itself the hung server: it keeps accepting
//     connections and reading what clients send, and never answers nor forwards
//     anything. The connections open at that moment stay hung for good.
//   - Forward ends a BlackHole for new connections, to the same server or another
//     one (a failover that moved the address): the connections hung before stay hung,
//     as a lost host's half-open connections do.
//
// It can also make the server slow without any error: SetLatency delays what the
// server sends, and SetRate bounds the bytes per second the link passes (see
// shape.go); and make it look down: RefuseConnections resets every connection until
// AcceptConnections (see refuse.go).
type Proxy struct {
	ln   net.Listener
	sent atomic.Int64 // bytes read from clients

	mu       sync.Mutex // guards the fields below
	upstream string
	held     bool
	black    bool
	silent   []*atomic.Bool // per accepted connection: black-holed
	release  chan struct{}  // closed when a hold ends
	conns    []net.Conn
	closed   bool // set by close: a connection accepted after it is closed at once
	wg       sync.WaitGroup

	shaper                  // latency and bandwidth (shape.go)
	refuser                 // refused connections (refuse.go)
	stop      chan struct{} // closed by close: ends the shaper's waits
	closeOnce sync.Once     // Close and the test's cleanup may both close
}

// NewProxy listens on a loopback port for the server at upstream (host:port) and is
// closed when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: upstream, release: make(chan struct{}), stop: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Sent returns the number of bytes clients have sent through the proxy.
func (p *Proxy) Sent() int64 { return p.sent.Load() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.arrived(down) {
			continue
		}
		silent, upstream, ok := p.track(down)
		if !ok {
			return
		}
		if p.refused(down) { // RefuseConnections ran between the two checks
			continue
		}
		if silent.Load() {
			p.wg.Add(1)
			go p.pipe(io.Discard, down, false, silent)
			continue
		}
		up, err := net.Dial("tcp", upstream)
		if err != nil {
			down.Close()
			continue
		}
		if _, _, ok := p.track(up); !ok {
			down.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(up, down, false, silent)
		go p.pipe(down, up, true, silent)
	}
}

// track records c so that close can close it, and returns its silence (set now if
// the server is black-holed, and by a later BlackHole) and the upstream to dial;
// after close it closes c itself and reports !ok, so a connection accepted while the
// proxy closes cannot outlive it and hang the test's cleanup.
func (p *Proxy) track(c net.Conn) (silent *atomic.Bool, upstream string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return nil, "", false
	}
	p.conns = append(p.conns, c)
	silent = &atomic.Bool{}
	silent.Store(p.black)
	p.silent = append(p.silent, silent)
	return silent, p.upstream, true
}

// pipe copies src to dst until either fails; from the server (fromServer) it waits
// while held. Once black-holed nothing goes anywhere, clients are still read from, and
// a server that closes its side leaves the client's open: a hung server does not hang
// up. What it reads passes the link's bandwidth bound here (the reader waits, so TCP
// pushes back on the sender) and reaches dst through a queue that adds the latency.
func (p *Proxy) pipe(dst io.Writer, src net.Conn, fromServer bool, silent *atomic.Bool) {
	defer p.wg.Done()
	q := make(chan delayed, 1024)
	p.wg.Add(1)
	go p.deliver(dst, q, fromServer, silent)
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !fromServer {
			p.sent.Add(int64(n))
		}
		p.mu.Lock()
		release, held := p.release, p.held
		p.mu.Unlock()
		if n > 0 && fromServer && held {
			<-release
		}
		for off := 0; off < n && !silent.Load(); {
			end := min(n, off+p.piece())
			if !p.throttle(end-off, p.stop) {
				return
			}
			q <- delayed{data: append([]byte(nil), buf[off:end]...), read: time.Now(), fromServer: fromServer}
			off = end
		}
		if err != nil {
			return
		}
	}
}

// deliver writes what pipe queued, each piece once it is due, and closes dst when the
// queue ends or a write fails (not the client's side of a black-holed server).
func (p *Proxy) deliver(dst io.Writer, q <-chan delayed, fromServer bool, silent *atomic.Bool) {
	defer p.wg.Done()
	defer func() {
		if c, ok := dst.(net.Conn); ok && !(fromServer && silent.Load()) {
			c.Close()
		}
	}()
	failed := false
	for d := range q {
		if failed || !p.hold(d, p.stop) || silent.Load() {
			continue // drained, so that pipe never blocks on a dead writer
		}
		if _, err := dst.Write(d.data); err != nil {
			failed = true
			if c, ok := dst.(net.Conn); ok {
				c.Close()
			}
		}
	}
}

// Hold stops forwarding what the server sends until Resume.
func (p *Proxy) Hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Resume forwards again what Hold held back.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		p.held = false
		close(p.release)
		p.release = make(chan struct{})
	}
}

// BlackHole makes the server look hung from now on, for open connections (for good)
// and new ones (until Forward).
func (p *Proxy) BlackHole() {
	p.mu.Lock()
	p.black = true
	for _, s := range p.silent {
		s.Store(true)
	}
	p.mu.Unlock()
}

// Forward has new connections forwarded to upstream (host:port) from now on; the
// connections a BlackHole hung stay hung.
func (p *Proxy) Forward(upstream string) {
	p.mu.Lock()
	p.black, p.upstream = false, upstream
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection through it now, hung ones
// included (clients see them end); it is also done when the test ends.
func (p *Proxy) Close() { p.close() }

func (p *Proxy) close() { p.closeOnce.Do(p.shut) }

func (p *Proxy) shut() {
	p.Resume()
	close(p.stop)
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
