package amqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// A caller that needs a connection while the broker does not answer waits for the dial
// no longer than its context, even when it started the dial itself; the dial goes on
// and serves the next caller once the broker answers. (The dial used to run on the
// first caller's goroutine: a probe with a 500ms deadline took the whole 5s dial
// timeout, and missed its deadline even when the broker recovered during the dial.)
func TestConnectionWaitsForTheDialNoLongerThanItsContext(t *testing.T) {
	direct := harness.AMQPURL(t)
	p, url := newProxy(t, direct)
	p.Hold() // the broker's handshake answers are held back
	defer p.Resume()
	m, err := amqp.NewManager(url+"?heartbeat=0", amqp.WithDialTimeout(2*time.Second), amqp.WithRedialDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// The watcher's first dial times out; it does not dial again for an hour.
	var de *amqp.DialError
	if _, err := m.Connection(ctx(t)); !errors.As(err, &de) {
		t.Fatalf("first dial to a silent broker: %v, want a *DialError", err)
	}
	// This caller starts the next dial itself and gives up at its deadline.
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := m.Connection(c); !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) {
		t.Fatalf("Connection under a 50ms deadline while the broker is silent: %v, want the deadline, not the dial's error", err)
	}
	// The dial it started goes on: the broker answers again and the next caller gets
	// the connection that dial makes.
	p.Resume()
	if conn, err := m.Connection(ctx(t)); err != nil || conn.IsClosed() {
		t.Fatalf("after the broker answered again: %v", err)
	}
}
