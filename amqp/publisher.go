package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Broker is the Destination.Broker of RabbitMQ destinations.
const Broker = "amqp"

// DefaultExchange is the destination name of RabbitMQ's default exchange, whose real
// name is the empty string. RabbitMQ's management UI shows it under this name too.
const DefaultExchange = "amq.default"

// Defaults of a Publisher.
const (
	DefaultConfirmTimeout = 5 * time.Second
	// DefaultMaxIdleChannels is the Manager's DefaultMaxChannels: a publisher keeps
	// every channel it opened, so that bursts and timeouts cost no channel.open.
	DefaultMaxIdleChannels = DefaultMaxChannels
)

// Exchange returns the RabbitMQ exchange a destination names: d.Name, except that
// DefaultExchange is "".
func Exchange(d transport.Destination) string {
	if d.Name == DefaultExchange {
		return ""
	}
	return d.Name
}

// Destination returns the destination of an exchange ("" is DefaultExchange).
func Destination(exchange string) transport.Destination {
	if exchange == "" {
		exchange = DefaultExchange
	}
	return transport.Destination{Broker: Broker, Name: exchange}
}

// PublisherOption configures a Publisher.
type PublisherOption func(*Publisher) error

// WithConfirmTimeout bounds the wait for the broker's confirms after a Publish has
// sent its messages (default DefaultConfirmTimeout). A confirm that does not arrive in
// time is a *ConfirmError matching ErrConfirmTimeout, classified Failure.
func WithConfirmTimeout(d time.Duration) PublisherOption {
	return option.Check(d <= 0, fmt.Sprintf("amqp: WithConfirmTimeout(%v): the timeout must be positive", d), func(p *Publisher) { p.confirmTimeout = d })
}

// WithMandatory publishes with the mandatory flag: a message that no queue takes is
// returned by the broker and reported as a *ReturnedError (classified Neutral). The
// broker sends a return without saying which publish it belongs to, so a mandatory
// Publish sends its messages one at a time, each after the previous one's confirm.
func WithMandatory() PublisherOption {
	return option.Set(func(p *Publisher) { p.mandatory = true })
}

// WithMaxIdleChannels bounds the confirm-mode channels the publisher keeps open
// between publishes (default DefaultMaxIdleChannels). A channel a publish gives back
// beyond it is closed. Channels open at once are bounded by the Manager
// (WithMaxChannels), idle or not.
func WithMaxIdleChannels(n int) PublisherOption {
	return option.Check(n < 0, fmt.Sprintf("amqp: WithMaxIdleChannels(%d): the bound must not be negative", n), func(p *Publisher) { p.maxIdle = n })
}

// Publisher publishes to RabbitMQ exchanges with publisher confirms over a Manager's
// connection, each exchange under its own circuit of the registry given to
// NewPublisher, "amqp:<exchange>" ("amqp:amq.default" for the default exchange),
// judged by Classify and the registry's deadline rule. It is guarded already: do not
// guard it again.
//
// A message's Key is the routing key, its Value the body, its Headers the AMQP
// headers as byte arrays (a later header overwrites an earlier one of the same key).
// Messages are published persistent (delivery mode 2).
//
// Every publish takes a confirm-mode channel of its own from a pool bounded by the
// Manager (WithMaxChannels), so no channel is used by two publishes at once and the
// connection never runs out of channel ids. A channel the broker closed is dropped;
// a channel left with confirms outstanding (a timeout, a cancelled caller) goes back
// to the pool, except with WithMandatory, where it is closed by the manager's
// watcher. It is safe for concurrent use.
type Publisher struct {
	m              *Manager
	reg            *registry.Registry
	confirmTimeout time.Duration
	mandatory      bool
	maxIdle        int

	idle chan *channel // idle channels, each holding a slot of the manager's pool (pool.go)

	mu     sync.Mutex // guards closed
	closed bool
}

var (
	_ transport.Publisher   = (*Publisher)(nil)
	_ transport.Classifying = (*Publisher)(nil)
)

// channel is a confirm-mode channel with its notifications.
type channel struct {
	ch      *amqp091.Channel
	conn    *amqp091.Connection // the connection it was opened on
	closes  chan *amqp091.Error // buffered: the broker's reason arrives before the confirms fail
	returns chan amqp091.Return // mandatory only; buffered: a return arrives before its confirm
	block   *blockEpoch         // the connection's flow-control state when the publish took it
}

// blocked returns a channel closed when the broker blocks the connection (nil, which
// never fires, when the connection is no longer the manager's).
func (c *channel) blocked() <-chan struct{} {
	if c.block == nil {
		return nil
	}
	return c.block.blocked
}

// GuardedBy returns the registry whose circuits guard the publisher, so that
// registry.Guard hands it back rather than guard it twice (registry.Guarded).
func (p *Publisher) GuardedBy() *registry.Registry { return p.reg }

var _ registry.Guarded = (*Publisher)(nil)

// NewPublisher returns a publisher over m's connection whose publishes go through
// reg's circuits, one per exchange. It makes m's connection circuit live in reg
// (registry.Adopt, under Manager.ConnectionDestination); it fails when reg already
// holds another Manager's circuit under that name.
func NewPublisher(m *Manager, reg *registry.Registry, opts ...PublisherOption) (*Publisher, error) {
	if m == nil {
		return nil, fmt.Errorf("amqp: NewPublisher: nil Manager")
	}
	if reg == nil {
		return nil, fmt.Errorf("amqp: NewPublisher: nil Registry: the publisher guards every exchange with a circuit of it")
	}
	p := &Publisher{m: m, reg: reg, confirmTimeout: DefaultConfirmTimeout, maxIdle: DefaultMaxIdleChannels}
	if err := option.Apply("amqp: NewPublisher", p, opts); err != nil {
		return nil, err
	}
	// The connection circuit refuses publishes too (a *DialError names it): it is
	// shown beside the exchanges' circuits.
	if err := reg.Adopt(m.ConnectionDestination(), connectionCircuit{m.circuit, m}); err != nil {
		return nil, fmt.Errorf("amqp: NewPublisher: %w (one Manager per broker and registry)", err)
	}
	p.idle = make(chan *channel, p.maxIdle)
	m.addPublisher(p)
	return p, nil
}

// Classifier returns Classify: the outbox takes it from the publisher
// (transport.Classifying).
func (p *Publisher) Classifier() transport.Classifier { return Classify }

// Publish sends msgs to the exchange d names, under its circuit, and waits for the
// broker's confirms. A nil error means every message was confirmed (and, with
// WithMandatory, routed). A circuit that refuses the call gives a
// *registry.RejectedError without sending anything. When only some messages failed
// the error is a *transport.BatchError; otherwise it is the error of the messages
// (see Classify for what each kind means).
func (p *Publisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	if ctx == nil {
		return errors.New("amqp: Publish: nil context")
	}
	if d.Broker != Broker {
		return fmt.Errorf("%w: %s", ErrWrongBroker, d)
	}
	return p.reg.Call(ctx, d, len(msgs), Classify, func(ctx context.Context) error {
		return p.publish(ctx, d, msgs)
	})
}

// publish is Publish without the circuit.
func (p *Publisher) publish(ctx context.Context, d transport.Destination, msgs []transport.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := p.get(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// The caller's context ended while the pool opened or awaited a channel:
			// the deadline judges this client's set-up, not the broker's confirms.
			return fmt.Errorf("%w: %w", transport.ErrNotSent, err)
		}
		return err
	}
	exchange := Exchange(d)
	var errs []error
	var reusable bool
	if p.mandatory {
		errs, reusable = p.sendEach(ctx, c, exchange, msgs)
	} else {
		errs, reusable = p.sendAll(ctx, c, exchange, msgs)
	}
	p.put(c, reusable)
	return result(d, errs)
}

// sendAll sends every message, then waits for their confirms under one timer. It
// returns each message's error (nil when all were confirmed) and whether the channel
// may serve another publish.
func (p *Publisher) sendAll(ctx context.Context, c *channel, exchange string, msgs []transport.Message) ([]error, bool) {
	var one [1]*amqp091.DeferredConfirmation
	dcs := one[:]
	if len(msgs) > 1 {
		dcs = make([]*amqp091.DeferredConfirmation, len(msgs))
	}
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	sent := 0
	for i, m := range msgs {
		dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, string(m.Key), false, false, publishing(m))
		if err != nil {
			for j := i; j < len(msgs); j++ {
				fail(j, err)
			}
			break
		}
		dcs[i] = dc
		sent++
	}
	timer := time.NewTimer(p.confirmTimeout)
	defer timer.Stop()
	settled := true // no confirm is outstanding
	for i := 0; i < sent; i++ {
		select {
		case <-dcs[i].Done():
			if !dcs[i].Acked() {
				fail(i, &ConfirmError{Exchange: exchange})
			}
			continue
		case <-timer.C:
			for j := i; j < sent; j++ {
				fail(j, &ConfirmError{Exchange: exchange, Timeout: p.confirmTimeout})
			}
		case <-c.blocked():
			for j := i; j < sent; j++ {
				fail(j, c.block.err(p.m.addr))
			}
		case <-ctx.Done():
			for j := i; j < sent; j++ {
				fail(j, ctx.Err())
			}
		}
		settled = false
		break
	}
	return p.explain(c, exchange, errs, settled)
}

// sendEach sends one message at a time and waits for its confirm, so that a return
// belongs to the message just sent.
func (p *Publisher) sendEach(ctx context.Context, c *channel, exchange string, msgs []transport.Message) ([]error, bool) {
	errs := make([]error, len(msgs))
	timer := time.NewTimer(p.confirmTimeout)
	defer timer.Stop()
	for i, m := range msgs {
		dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, string(m.Key), true, false, publishing(m))
		settled := true
		if err == nil {
			timer.Reset(p.confirmTimeout)
			settled, err = p.wait(ctx, timer, c, dc, exchange)
		}
		errs[i] = err
		if err != nil && (!settled || c.ch.IsClosed()) {
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = err
			}
			return p.explain(c, exchange, errs, settled)
		}
	}
	return p.explain(c, exchange, errs, true)
}

// wait waits for one mandatory message's confirm and reports its return, if any.
// settled is false when the confirm is still outstanding (a timeout, a cancelled
// caller).
func (p *Publisher) wait(ctx context.Context, timer *time.Timer, c *channel, dc *amqp091.DeferredConfirmation, exchange string) (settled bool, err error) {
	select {
	case <-dc.Done():
	case <-timer.C:
		return false, &ConfirmError{Exchange: exchange, Timeout: p.confirmTimeout}
	case <-c.blocked():
		return false, c.block.err(p.m.addr)
	case <-ctx.Done():
		return false, ctx.Err()
	}
	// The broker sends a return before the confirm, so it is here already. Take it
	// even when the message was nacked, so that it is never reported for the next
	// publish on this channel nor blocks the connection's reader.
	var returned *ReturnedError
	select {
	case r, ok := <-c.returns:
		if ok {
			returned = &ReturnedError{Exchange: exchange, RoutingKey: r.RoutingKey, Code: r.ReplyCode, Text: r.ReplyText}
		}
	default:
	}
	if !dc.Acked() {
		return true, &ConfirmError{Exchange: exchange}
	}
	if returned != nil {
		return true, returned
	}
	return true, nil
}

// explain replaces the errors of messages lost to a channel the broker closed by the
// broker's reason, and says whether the channel may be reused: only when it is open
// and no confirm is outstanding.
func (p *Publisher) explain(c *channel, exchange string, errs []error, settled bool) ([]error, bool) {
	var reason *amqp091.Error
	select {
	case reason = <-c.closes: // nil when the channel was closed without an exception
	default:
	}
	// A channel closed under the publish: by the caller's own Manager.Close, which
	// says nothing about the broker (whatever amqp091 gives as the reason, such as a
	// close that timed out), or by the broker, with its reason.
	var lost error
	switch {
	case p.m.isClosed():
		lost = ErrClosedInFlight
	case reason != nil:
		lost = &ChannelError{Exchange: exchange, Err: reason}
	case !c.conn.IsClosed():
		// The channel is closed with no exception from the broker while the
		// connection lives: this process closed it. Not the broker's verdict.
		for i, err := range errs {
			if errors.Is(err, amqp091.ErrClosed) {
				errs[i] = clientSide(err)
			}
		}
	}
	if lost != nil {
		for i, err := range errs {
			if errors.Is(err, ErrNacked) || errors.Is(err, amqp091.ErrClosed) {
				errs[i] = lost
			}
		}
	}
	// Outstanding confirms do not keep a channel from serving the next publish
	// (confirms are per message), but a late return would be taken for the next
	// mandatory publish's.
	return errs, (settled || !p.mandatory) && reason == nil && !c.ch.IsClosed()
}

// result turns the messages' errors into Publish's error.
func result(d transport.Destination, errs []error) error {
	var failed []transport.MessageError
	for i, err := range errs {
		if err != nil {
			failed = append(failed, transport.MessageError{Index: i, Err: err})
		}
	}
	switch {
	case len(failed) == 0:
		return nil
	case len(failed) < len(errs):
		return &transport.BatchError{Destination: d, Failed: failed}
	}
	for _, f := range failed { // none was published: report the worst
		if Classify(f.Err) == breaker.Failure {
			return f.Err
		}
	}
	return failed[0].Err
}

// publishing is the AMQP message for m: persistent, with the properties its
// PropertyPrefix headers set (properties.go) and its other headers as the table.
func publishing(m transport.Message) amqp091.Publishing {
	return withProperties(amqp091.Publishing{Body: m.Value, DeliveryMode: amqp091.Persistent}, m)
}
