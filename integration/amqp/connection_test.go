package amqp_test

import (
	"context"
	"errors"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// breakLong keeps a circuit that opens in a test open for the rest of it.
const breakLong = time.Hour

func TestConfirmTimeoutIsFailure(t *testing.T) {
	p, url := newProxy(t, harness.AMQPURL(t))
	x := declareExchange(t, url, "fanout", false)
	// The timeout is what a held confirm waits, and also what the healthy publishes
	// around it have to open a channel and be confirmed: 200ms was missed on a loaded
	// machine.
	s := newSetup(t, url, breaker.Policy{FailureThreshold: 1, BreakDuration: breakLong}, nil, amqp.WithConfirmTimeout(roomyConfirmTimeout))
	if err := s.pub.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
		t.Fatal(err) // the connection and a channel are open before the confirms are held
	}
	p.Hold()
	err := s.pub.Publish(ctx(t), amqp.Destination(x), transport.Message{Value: []byte("late")})
	p.Resume()
	var ce *amqp.ConfirmError
	if !errors.Is(err, amqp.ErrConfirmTimeout) || !errors.As(err, &ce) || ce.Timeout != roomyConfirmTimeout {
		t.Fatalf("held confirm: %v", err)
	}
	if amqp.Classify(err) != breaker.Failure {
		t.Fatalf("Classify = %v", amqp.Classify(err))
	}
	if snap := s.reg.Snapshots()[amqp.Destination(x)]; snap.State != breaker.Open {
		t.Fatalf("circuit %v after a confirm timeout, want open", snap.State)
	}
	// The connection still serves publishes.
	if err := s.raw.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
		t.Fatal(err)
	}
}

func TestConnectionForcedIsFailureAndManagerRedials(t *testing.T) {
	url := harness.AMQPURL(t)
	x := declareExchange(t, url, "fanout", false)
	before := runtime.NumGoroutine()
	s := newSetup(t, url, defaultPolicy, nil)
	if err := s.pub.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
		t.Fatal(err)
	}
	conn, err := s.m.Connection(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	closeConnection(t, conn)
	reason := <-closed
	if reason == nil || reason.Code != amqp091.ConnectionForced || amqp.Classify(reason) != breaker.Failure {
		t.Fatalf("close reason %v", reason)
	}
	// A channel of the dead connection says the same.
	if _, err := conn.Channel(); !errors.Is(err, amqp091.ErrClosed) || amqp.Classify(err) != breaker.Failure {
		t.Fatalf("channel on the closed connection: %v", err)
	}
	var next *amqp091.Connection
	waitFor(t, 10*time.Second, "manager redial", func() bool {
		next, err = s.m.Connection(ctx(t))
		return err == nil && next != conn
	})
	if err := s.pub.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
		t.Fatal(err)
	}
	if err := s.raw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.m.Close(); err != nil {
		t.Fatal(err)
	}
	goroutinesBack(t, before)
}

// madeCalls counts the calls reg's circuits let through (every call but the
// rejected ones).
func madeCalls(reg *registry.Registry) uint64 {
	var n uint64
	for _, r := range reg.Report() {
		n += r.Calls.Total() - r.Calls.Rejected
	}
	return n
}

func TestBrokerStoppedCircuitsOpenAndHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a RabbitMQ node of its own and stops it for a few seconds; not run with -short")
	}
	node := harness.NewRabbitNode(t) // never the machine's broker: its other clients would see the outage
	url := node.URL()
	exchanges := []string{declareExchange(t, url, "fanout", false), declareExchange(t, url, "fanout", false)}
	before := runtime.NumGoroutine()

	m, err := amqp.NewManager(url,
		amqp.WithRedialDelay(50*time.Millisecond),
		amqp.WithDialPolicy(breaker.Policy{FailureThreshold: 2, BreakDuration: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close() // when the test fails before the explicit Close
	// The exchange circuits run on a fake clock: an open one stays open however slow
	// the machine is, until the test moves the clock past its break.
	clock := fakeclock.New(time.Now())
	exchangePolicy := breaker.Policy{FailureThreshold: 2, BreakDuration: 500 * time.Millisecond}
	reg, err := registry.New(registry.Policy{Circuit: exchangePolicy}, registry.WithClock(clock), registry.WithCallCounts())
	if err != nil {
		t.Fatal(err)
	}
	pub, err := amqp.NewPublisher(m, reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range exchanges {
		if err := pub.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
			t.Fatal(err)
		}
	}

	node.StopApp(t)

	// Every exchange circuit opens on the failures the outage causes.
	var seenRefused, seenDialOpen bool
	for _, x := range exchanges {
		d := amqp.Destination(x)
		waitFor(t, 10*time.Second, "circuit of "+x+" open", func() bool {
			err := pub.Publish(ctx(t), d, transport.Message{})
			if errors.Is(err, breaker.ErrOpen) {
				var rej *registry.RejectedError
				if errors.As(err, &rej) {
					return true
				}
				seenDialOpen = true // rejected by the connection circuit, not the exchange's
			}
			if err == nil {
				t.Fatalf("publish to %s succeeded with the broker stopped", x)
			}
			if amqp.Classify(err) != breaker.Failure {
				t.Fatalf("outage error %v classified %v", err, amqp.Classify(err))
			}
			seenRefused = seenRefused || errors.Is(err, syscall.ECONNREFUSED)
			return false
		})
		if s := reg.Snapshots()[d]; s.State != breaker.Open {
			t.Fatalf("circuit of %s is %v", x, s.State)
		}
	}
	// Calls now fail fast: the guard rejects without reaching the adapter.
	calls := madeCalls(reg)
	for _, x := range exchanges {
		if err := pub.Publish(ctx(t), amqp.Destination(x), transport.Message{}); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("publish to an open circuit: %v", err)
		}
	}
	if madeCalls(reg) != calls {
		t.Fatal("a rejected publish reached the adapter")
	}
	// The connection circuit is open too and rejects a dial instead of trying it.
	waitFor(t, 10*time.Second, "connection circuit open", func() bool {
		return m.Circuit().State() != breaker.Closed
	})
	_, err = m.Connection(ctx(t))
	var de *amqp.DialError
	if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &de) || amqp.Classify(err) != breaker.Failure {
		t.Fatalf("dial with the connection circuit open: %v", err)
	}
	t.Logf("refused dials seen: %v; connection circuit rejections seen by publishes: %v", seenRefused, seenDialOpen)
	if !seenRefused && !seenDialOpen {
		t.Fatal("no publish error came from the dead connection")
	}

	node.StartApp(t)

	// The watcher's probe reconnects and closes the connection circuit.
	waitFor(t, 30*time.Second, "manager reconnected", func() bool {
		return m.Circuit().State() == breaker.Closed
	})
	if _, err := m.Connection(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// One probe closes each exchange circuit.
	clock.Advance(exchangePolicy.BreakDuration)
	for _, x := range exchanges {
		d := amqp.Destination(x)
		if err := pub.Publish(ctx(t), d, transport.Message{}); err != nil {
			t.Fatalf("probe to %s: %v", x, err)
		}
		if s := reg.Snapshots()[d]; s.State != breaker.Closed {
			t.Fatalf("circuit of %s is %v after one successful probe", x, s.State)
		}
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	goroutinesBack(t, before)
}

// The broker stops answering (the proxy holds what it sends) after a publish has
// timed out and left a channel for the watcher to close: Manager.Close still returns,
// bounded by the dial timeout rather than by heartbeats (off here) or the broker.
func TestManagerCloseIsBoundedWhileTheBrokerHangs(t *testing.T) {
	direct := harness.AMQPURL(t)
	x := declareExchange(t, direct, "fanout", false)
	p, url := newProxy(t, direct)
	m, err := amqp.NewManager(url+"?heartbeat=0", amqp.WithDialTimeout(roomyDialTimeout))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := amqp.NewPublisher(m, newRegistry(t), amqp.WithConfirmTimeout(roomyConfirmTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
		t.Fatal(err)
	}
	p.Hold()
	defer p.Resume()
	if err := raw.Publish(ctx(t), amqp.Destination(x), transport.Message{}); !errors.Is(err, amqp.ErrConfirmTimeout) {
		t.Fatalf("held confirm: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil && !errors.Is(err, amqp091.ErrClosed) {
			t.Logf("Close: %v", err) // the broker never confirmed the close: said, not hidden
		}
	case <-time.After(10 * time.Second):
		p.Resume() // let the blocked Close finish before the test ends
		<-closed
		t.Fatal("Manager.Close blocked for 10s on a broker that does not answer")
	}
	if _, err := m.Connection(ctx(t)); !errors.Is(err, amqp.ErrManagerClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// A broker that stops answering cannot hold a publish that needs a new channel: the
// opening is bounded by the confirm timeout and counts as a Failure.
func TestOpeningAChannelIsBoundedWhileTheBrokerHangs(t *testing.T) {
	direct := harness.AMQPURL(t)
	x := declareExchange(t, direct, "fanout", false)
	p, url := newProxy(t, direct)
	m, err := amqp.NewManager(url+"?heartbeat=0", amqp.WithDialTimeout(roomyDialTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Resume(); m.Close() }()
	raw, err := amqp.NewPublisher(m, newRegistry(t), amqp.WithConfirmTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Connection(ctx(t)); err != nil { // connected, no channel yet
		t.Fatal(err)
	}
	p.Hold()
	done := make(chan error, 1)
	go func() { done <- raw.Publish(ctx(t), amqp.Destination(x), transport.Message{}) }()
	select {
	case err := <-done:
		if !errors.Is(err, amqp.ErrChannelTimeout) || amqp.Classify(err) != breaker.Failure {
			t.Fatalf("publish needing a channel from a silent broker: %v (%v); want ErrChannelTimeout, Failure", err, amqp.Classify(err))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a publish needing a new channel waited 10s on a broker that does not answer")
	}
}

// A slow broker makes opening a channel (two round trips) take longer than a publish
// on an open one (one). A publish whose deadline passes while its channel is still
// opening reports that its message was never sent (transport.ErrNotSent), so that a
// limited circuit does not count the client's set-up against a broker that answers
// publishes; a publish whose confirm misses the deadline does not.
func TestDeadlineDuringChannelOpeningIsNotSent(t *testing.T) {
	direct := harness.AMQPURL(t)
	x := declareExchange(t, direct, "fanout", false)
	d := amqp.Destination(x)
	p, url := newProxy(t, direct)
	s := newSetup(t, url, breaker.Policy{FailureThreshold: 1 << 30, BreakDuration: time.Second}, nil)
	if _, err := s.m.Connection(ctx(t)); err != nil { // connected, no channel yet
		t.Fatal(err)
	}
	// Each answer comes a second late; the short deadline (400ms) leaves the publish
	// time to be sent on a loaded machine and passes well before any answer can come.
	p.SetLatency(time.Second)
	publish := func(deadline time.Duration) error {
		c, cancel := context.WithTimeout(ctx(t), deadline)
		defer cancel()
		return s.pub.Publish(c, d, transport.Message{Value: []byte("slow")})
	}
	if err := publish(400 * time.Millisecond); !errors.Is(err, transport.ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline while the channel opens: %v; want ErrNotSent and the deadline", err)
	}
	if err := publish(20 * time.Second); err != nil { // leaves an open channel in the pool
		t.Fatal(err)
	}
	if err := publish(400 * time.Millisecond); errors.Is(err, transport.ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline while the confirm is awaited on an open channel: %v; want the deadline without ErrNotSent", err)
	}
}

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
