package harness

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"
)

// BrokerFault is how a faulted kfake broker behaves (see BrokerFaults).
type BrokerFault int32

// The faults of a kfake broker.
const (
	// Healthy forwards everything.
	Healthy BrokerFault = iota
	// BlackHole makes the broker look hung: it accepts connections and reads what
	// clients send, and answers nothing.
	BlackHole
	// Refuse makes the broker look down: its connections are cut, and new ones are
	// closed as soon as they are accepted.
	Refuse
)

// BrokerFaults injects faults into single brokers of an in-process kfake cluster,
// through the cluster's listeners (kfake.ListenFn), leaving the other brokers
// alone: pass Opt to KFake, then set a broker's fault by its node index.
type BrokerFaults struct {
	mu  sync.Mutex // guards lns
	lns []*faultListener
}

// Opt is the kfake option that makes the cluster listen through f; the n-th
// listener is node n's.
func (f *BrokerFaults) Opt() kfake.Opt {
	return kfake.ListenFn(func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		fl := &faultListener{Listener: ln, conns: map[*faultConn]struct{}{}}
		f.mu.Lock()
		f.lns = append(f.lns, fl)
		f.mu.Unlock()
		return fl, nil
	})
}

// Set gives node its fault from now on; Refuse also cuts the node's connections.
func (f *BrokerFaults) Set(node int, fault BrokerFault) {
	f.mu.Lock()
	fl := f.lns[node]
	f.mu.Unlock()
	fl.fault.Store(int32(fault))
	if fault == Refuse {
		fl.cut()
	}
}

type faultListener struct {
	net.Listener
	fault atomic.Int32

	mu    sync.Mutex // guards conns
	conns map[*faultConn]struct{}
}

func (l *faultListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if BrokerFault(l.fault.Load()) == Refuse {
			c.Close()
			continue
		}
		fc := &faultConn{Conn: c, l: l}
		l.mu.Lock()
		l.conns[fc] = struct{}{}
		l.mu.Unlock()
		return fc, nil
	}
}

func (l *faultListener) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		c.Conn.Close()
		delete(l.conns, c)
	}
}

type faultConn struct {
	net.Conn
	l *faultListener
}

// Read hands the broker what the client sent, except while black-holed: then what
// arrives is dropped, so the broker never answers it.
func (c *faultConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || BrokerFault(c.l.fault.Load()) == Healthy {
			return n, err
		}
	}
}

// Write drops the broker's answers while the broker is faulted.
func (c *faultConn) Write(b []byte) (int, error) {
	if BrokerFault(c.l.fault.Load()) != Healthy {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *faultConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
