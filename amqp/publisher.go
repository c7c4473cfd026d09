package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/breaker"
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
	DefaultConfirmTimeout  = 5 * time.Second
	DefaultMaxIdleChannels = 16
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
	return func(p *Publisher) error {
		if d <= 0 {
			return fmt.Errorf("amqp: WithConfirmTimeout(%v): the timeout must be positive", d)
		}
		p.confirmTimeout = d
		return nil
	}
}

// WithMandatory publishes with the mandatory flag: a message that no queue takes is
// returned by the broker and reported as a *ReturnedError (classified Neutral). The
// broker sends a return without saying which publish it belongs to, so a mandatory
// Publish sends its messages one at a time, each after the previous one's confirm.
func WithMandatory() PublisherOption {
	return func(p *Publisher) error {
		p.mandatory = true
		return nil
	}
}

// WithMaxIdleChannels bounds the confirm-mode channels kept open between publishes
// (default DefaultMaxIdleChannels). Concurrent publishes beyond it open channels of
// their own, closed afterwards.
func WithMaxIdleChannels(n int) PublisherOption {
	return func(p *Publisher) error {
		if n < 0 {
			return fmt.Errorf("amqp: WithMaxIdleChannels(%d): the bound must not be negative", n)
		}
		p.maxIdle = n
		return nil
	}
}

// Publisher publishes to RabbitMQ exchanges with publisher confirms over a Manager's
// connection. It is a transport.Publisher whose errors Classify understands; guard it
// with registry.Registry.Guard(p, amqp.Classify) so that every exchange has its own
// circuit, "amqp:<exchange>" ("amqp:amq.default" for the default exchange).
//
// A message's Key is the routing key, its Value the body, its Headers the AMQP
// headers as byte arrays (a later header overwrites an earlier one of the same key).
// Messages are published persistent (delivery mode 2).
//
// Every publish takes a confirm-mode channel of its own from a pool, so no channel is
// used by two publishes at once. A channel the broker closed is dropped; a channel
// left with confirms outstanding (a timeout, a cancelled caller) is retired and closed
// by the manager's watcher. It is safe for concurrent use.
type Publisher struct {
	m              *Manager
	confirmTimeout time.Duration
	mandatory      bool
	maxIdle        int

	mu     sync.Mutex // guards the fields below
	idle   []*channel
	closed bool
}

var _ transport.Publisher = (*Publisher)(nil)

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

// NewPublisher returns a publisher over m's connection.
func NewPublisher(m *Manager, opts ...PublisherOption) (*Publisher, error) {
	if m == nil {
		return nil, fmt.Errorf("amqp: NewPublisher: nil Manager")
	}
	p := &Publisher{m: m, confirmTimeout: DefaultConfirmTimeout, maxIdle: DefaultMaxIdleChannels}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Publish sends msgs to the exchange d names and waits for the broker's confirms. A
// nil error means every message was confirmed (and, with WithMandatory, routed). When
// only some messages failed the error is a *transport.BatchError; otherwise it is the
// error of the messages (see Classify for what each kind means).
func (p *Publisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	if d.Broker != Broker {
		return fmt.Errorf("%w: %s", ErrWrongBroker, d)
	}
	if len(msgs) == 0 {
		return registry.NoMessagesError(d)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := p.get(ctx)
	if err != nil {
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
	}
	if lost != nil {
		for i, err := range errs {
			if errors.Is(err, ErrNacked) || errors.Is(err, amqp091.ErrClosed) {
				errs[i] = lost
			}
		}
	}
	return errs, settled && reason == nil && !c.ch.IsClosed()
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

// get takes an idle channel on the current connection, or opens one.
func (p *Publisher) get(ctx context.Context) (*channel, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, ErrPublisherClosed
	}
	conn, err := p.m.Connection(ctx)
	if err != nil {
		return nil, err
	}
	// A blocked broker reads nothing more from the connection: fail now rather than
	// wait for a confirm or a channel that cannot come before the alarm clears.
	block := p.m.blocking(conn)
	var blocked <-chan struct{}
	if block != nil {
		blocked = block.blocked
		select {
		case <-blocked:
			return nil, block.err(p.m.addr)
		default:
		}
	}
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if c.conn == conn && !c.ch.IsClosed() {
			p.mu.Unlock()
			c.block = block
			return c, nil
		}
		// Its connection is gone, and the channel with it.
	}
	p.mu.Unlock()
	// Opening a channel and entering confirm mode are broker round trips that amqp091
	// does not bound: a broker that stops answering would hold the publish until
	// heartbeats give up. Wait no longer than the confirm timeout or the caller; the
	// opening goes on until the broker answers or the connection dies, and a channel
	// that comes too late is retired, never used.
	opened := make(chan openResult, 1)
	go func() { c, err := p.open(conn); opened <- openResult{c, err} }()
	timer := time.NewTimer(p.confirmTimeout)
	defer timer.Stop()
	select {
	case r := <-opened:
		if r.err != nil && p.m.isClosed() {
			// The caller's own Close ended the opening (amqp091 reports whatever
			// the closing connection said), not the broker.
			return nil, fmt.Errorf("%w while the publish opened its channel (%v)", ErrManagerClosed, r.err)
		}
		if r.c != nil {
			r.c.block = block
		}
		return r.c, r.err
	case <-timer.C:
		err = fmt.Errorf("%w after %v", ErrChannelTimeout, p.confirmTimeout)
	case <-blocked:
		err = block.err(p.m.addr)
	case <-ctx.Done():
		err = ctx.Err()
	}
	go func() {
		if r := <-opened; r.c != nil {
			p.m.retire(r.c.ch)
		}
	}()
	return nil, err
}

type openResult struct {
	c   *channel
	err error
}

// open opens a channel on conn and puts it in confirm mode.
func (p *Publisher) open(conn *amqp091.Connection) (*channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	c := &channel{ch: ch, conn: conn, closes: ch.NotifyClose(make(chan *amqp091.Error, 1))}
	if p.mandatory {
		c.returns = ch.NotifyReturn(make(chan amqp091.Return, 1))
	}
	if err := ch.Confirm(false); err != nil {
		p.m.retire(ch)
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	return c, nil
}

// put gives a channel back to the pool, or retires it.
func (p *Publisher) put(c *channel, reusable bool) {
	if reusable {
		p.mu.Lock()
		if !p.closed && len(p.idle) < p.maxIdle {
			p.idle = append(p.idle, c)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	if !c.ch.IsClosed() {
		p.m.retire(c.ch)
	}
}

// Close closes the idle channels; later publishes fail with ErrPublisherClosed. The
// manager's connection stays open.
func (p *Publisher) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.ch.Close()
	}
	return nil
}
