package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// NATSFault is a NATS-protocol proxy in front of a nats-server that fails a share of
// the publishes to a subject prefix, as a JetStream server in a brownout refuses
// some messages and stores the rest: instead of passing such a publish on, it
// answers on the message's reply subject as the server would when the stream has no
// leader for the moment (natsUnavailable: a 503 that blames the server, not the
// message). It counts the publishes it saw and those it failed. Everything else,
// and every publish it does not fail, passes unchanged, frame by frame. Put a Proxy
// behind it to make the server slow or refuse connections.
type NATSFault struct {
	// Addr is the fault layer's host:port, for the client's URL.
	Addr string
	// Seen counts the publishes to the prefix that arrived, failed ones included;
	// Failed those answered with the error.
	Seen, Failed atomic.Int64

	ln       net.Listener
	upstream string
	prefix   []byte
	answer   []byte // the JSON of the error the failed publishes get
	share    failShare

	mu     sync.Mutex // guards conns and closed
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// natsUnavailable is the answer of a JetStream that is not available for the moment
// (code 10008, nats.go's JSErrCodeJetStreamNotAvailable), as a stream without a
// leader gives.
const natsUnavailable = `{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`

// NewNATSFault listens on a loopback port in front of the nats-server at upstream
// (host:port), failing no publish until SetFailShare, and then a share of the
// publishes to subjects that begin with prefix. It is closed when the test ends.
func NewNATSFault(t testing.TB, upstream, prefix string) *NATSFault {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &NATSFault{Addr: ln.Addr().String(), ln: ln, upstream: upstream, prefix: []byte(prefix), answer: []byte(natsUnavailable)}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

// SetFailShare makes share (clamped to [0, 1]) of the publishes to the prefix fail
// from now on, each drawn on its own.
func (f *NATSFault) SetFailShare(share float64) { f.share.set(share) }

func (f *NATSFault) accept() {
	defer f.wg.Done()
	for {
		client, err := f.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", f.upstream)
		if err != nil {
			client.Close()
			continue
		}
		if !f.track(client, server) {
			return
		}
		c := &natsConn{f: f, client: client, server: server, subs: map[string]string{}}
		f.wg.Add(2)
		go c.fromClient()
		go c.fromServer()
	}
}

// track records the two sides of a connection so that close can close them; after
// close it closes them itself and reports false.
func (f *NATSFault) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	f.conns = append(f.conns, cs...)
	return true
}

func (f *NATSFault) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.ln.Close()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// natsConn is one client's connection through the fault layer.
type natsConn struct {
	f              *NATSFault
	client, server net.Conn
	wmu            sync.Mutex        // serialises whole frames to the client
	subs           map[string]string // the client's subscriptions: subject -> sid (fromClient's alone)
}

// fromClient passes the client's frames to the server, remembering its
// subscriptions, and fails a share of its publishes to the prefix.
func (c *natsConn) fromClient() {
	defer c.f.wg.Done()
	defer c.server.Close()
	defer c.client.Close()
	r := bufio.NewReaderSize(c.client, 64<<10)
	w := bufio.NewWriterSize(c.server, 64<<10)
	for {
		frame, args, err := readFrame(r)
		if err != nil {
			return
		}
		switch op := bytes.ToUpper(args[0]); {
		case bytes.Equal(op, []byte("SUB")) && len(args) >= 3:
			c.subs[string(args[1])] = string(args[len(args)-1])
		case (bytes.Equal(op, []byte("PUB")) || bytes.Equal(op, []byte("HPUB"))) && bytes.HasPrefix(args[1], c.f.prefix):
			c.f.Seen.Add(1)
			// A publish with a reply subject (PUB subject reply size, HPUB subject reply
			// hsize size) awaits an answer that can be given.
			withReply := len(args) == 4 && op[0] == 'P' || len(args) == 5
			if withReply && c.f.share.draw() {
				if sid, ok := c.sid(string(args[2])); ok {
					c.f.Failed.Add(1)
					if c.answer(args[2], sid) != nil {
						return
					}
					continue
				}
			}
		}
		if _, err := w.Write(frame); err != nil {
			return
		}
		if r.Buffered() == 0 { // nothing more at hand: send what is gathered
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// sid returns the id of the client's subscription that reply reaches: an exact one,
// or one whose last token is the wildcard '*' (a request inbox).
func (c *natsConn) sid(reply string) (string, bool) {
	if sid, ok := c.subs[reply]; ok {
		return sid, true
	}
	for i := len(reply) - 1; i >= 0; i-- {
		if reply[i] == '.' {
			sid, ok := c.subs[reply[:i+1]+"*"]
			return sid, ok
		}
	}
	return "", false
}

// answer sends the client the fault's answer on reply, for subscription sid.
func (c *natsConn) answer(reply []byte, sid string) error {
	frame := fmt.Appendf(nil, "MSG %s %s %d\r\n%s\r\n", reply, sid, len(c.f.answer), c.f.answer)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.client.Write(frame)
	return err
}

// fromServer passes the server's frames to the client, whole, so that an answer of
// the fault layer never lands inside one.
func (c *natsConn) fromServer() {
	defer c.f.wg.Done()
	defer c.client.Close()
	defer c.server.Close()
	r := bufio.NewReaderSize(c.server, 64<<10)
	var pending []byte
	for {
		frame, _, err := readFrame(r)
		if err != nil {
			return
		}
		pending = append(pending, frame...)
		if r.Buffered() > 0 && len(pending) < 64<<10 {
			continue // more at hand: one write for several frames
		}
		c.wmu.Lock()
		_, err = c.client.Write(pending)
		c.wmu.Unlock()
		if err != nil {
			return
		}
		pending = pending[:0]
	}
}

// readFrame reads one frame of the NATS protocol from r: a control line and, for the
// operations that carry one (PUB, HPUB, MSG, HMSG), the payload whose size is the
// line's last argument, with its CRLF. It returns the frame's bytes (valid until
// the next read) and the line's arguments, the operation first.
func readFrame(r *bufio.Reader) (frame []byte, args [][]byte, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, nil, err
	}
	frame = append([]byte(nil), line...)
	args = bytes.Fields(frame)
	if len(args) == 0 {
		return frame, [][]byte{nil}, nil
	}
	switch string(bytes.ToUpper(args[0])) {
	case "PUB", "HPUB", "MSG", "HMSG":
		n, err := strconv.Atoi(string(args[len(args)-1]))
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("harness: NATS frame %q: no payload size", bytes.TrimSpace(line))
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, nil, err
		}
		frame = append(frame, body...)
		args = bytes.Fields(frame[:len(line)])
	}
	return frame, args, nil
}
