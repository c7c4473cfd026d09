package amqp_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// proxy forwards TCP connections to the broker and can hold back what the broker
// sends, so a test can make confirms late without touching the shared broker.
type proxy struct {
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	held    bool
	release chan struct{} // closed when held ends
	conns   []net.Conn
	wg      sync.WaitGroup
}

// newProxy listens on loopback for amqpURL's broker; it is closed in cleanup. It
// returns the proxy and the URL that goes through it.
func newProxy(t testing.TB, amqpURL string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: u.Host, release: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, down, false)
		go p.pipe(down, up, true)
	}
}

// pipe copies src to dst; from the broker (fromBroker) it waits while held.
func (p *proxy) pipe(dst, src net.Conn, fromBroker bool) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && fromBroker {
			p.mu.Lock()
			release := p.release
			held := p.held
			p.mu.Unlock()
			if held {
				<-release
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			return
		}
	}
}

// hold stops forwarding what the broker sends until resume.
func (p *proxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// resume forwards again what hold held back.
func (p *proxy) resume() {
	p.mu.Lock()
	if p.held {
		p.held = false
		close(p.release)
		p.release = make(chan struct{})
	}
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.resume()
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
