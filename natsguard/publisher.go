package natsguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Broker is the broker of every stream destination: "nats:<stream>".
const Broker = "nats"

// ConnectionBroker is the broker of the connection circuit's destination:
// "nats-connection:<name>" (see WithConnectionName).
const ConnectionBroker = "nats-connection"

// DefaultMaxPending bounds the asynchronous messages a Publisher keeps awaiting
// their acks unless WithMaxPending says otherwise; it is nats.go's default
// PublishAsyncMaxPending.
const DefaultMaxPending = 4000

// defaultTimeout is nats.go's default JetStream API timeout, for a JetStream context
// that reports none.
const defaultTimeout = 5 * time.Second

// Stream returns the destination of the named stream: "nats:<name>".
func Stream(name string) transport.Destination {
	return transport.Destination{Broker: Broker, Name: name}
}

// Option configures a Publisher.
type Option func(*Publisher) error

// WithClassifier replaces Classify as the publisher's classifier for the streams'
// circuits (and for code that keeps messages for it, such as the outbox).
func WithClassifier(c transport.Classifier) Option {
	return option.Check(c == nil, "natsguard: WithClassifier(nil)", func(p *Publisher) { p.g.classify = c })
}

// WithConnectionName names the connection circuit "nats-connection:<name>". The
// default is the connection's name (nats.Name) when it has one, else the host:port
// of its first server. Publishers on connections to the same servers share the
// circuit when they share the name and the registry.
func WithConnectionName(name string) Option {
	return option.Set(func(p *Publisher) { p.g.conn = transport.Destination{Broker: ConnectionBroker, Name: name} })
}

// WithMaxPending bounds the asynchronous messages that await their acks (default
// DefaultMaxPending). A PublishAsync beyond it is refused at once with an error
// matching ErrTooManyPending, before any permit is taken; it never waits for room.
func WithMaxPending(n int) Option {
	return option.Check(n <= 0, fmt.Sprintf("natsguard: WithMaxPending(%d): the bound must be positive", n), func(p *Publisher) { p.maxPending = int64(n) })
}

// Publisher publishes to JetStream streams through a jetstream.JetStream, under one
// circuit per stream and one for the connection, taken from a registry. It is safe
// for concurrent use. The JetStream context and its connection stay the caller's:
// Close the Publisher before closing them.
type Publisher struct {
	js         jetstream.JetStream
	nc         *nats.Conn
	g          guard
	timeout    time.Duration // the JetStream context's DefaultTimeout
	maxPending int64
	// pending counts the asynchronous messages admitted whose promises have not
	// returned yet; with closed set, its fall to zero closes drained.
	pending   atomic.Int64
	closed    atomic.Bool
	drained   chan struct{}
	drainOnce sync.Once

	// ajs sends the asynchronous messages (asyncJetStream); inflight holds those
	// awaiting their acks, by the address of their nats.Msg, guarded by amu.
	ajs      jetstream.JetStream
	amu      sync.Mutex
	inflight map[*nats.Msg]*inflight
	// abandoning is set once Close gives the pending messages up: one sent after that
	// is given up too.
	abandoning atomic.Bool

	status    chan nats.Status // the watcher's status listener
	watcher   sync.WaitGroup
	abandoned atomic.Int64 // messages given up by Close
}

// NewPublisher returns a Publisher over js with the circuits of reg: one per stream
// ("nats:<stream>") and one for js's connection ("nats-connection:<name>"). It starts
// one goroutine that watches the connection for its close; Close stops it. It is
// already guarded (registry.Guarded): do not guard it again.
func NewPublisher(js jetstream.JetStream, reg *registry.Registry, opts ...Option) (*Publisher, error) {
	switch {
	case js == nil:
		return nil, errors.New("natsguard: NewPublisher: nil JetStream")
	case js.Conn() == nil:
		return nil, errors.New("natsguard: NewPublisher: the JetStream has no connection")
	case reg == nil:
		return nil, errors.New("natsguard: NewPublisher: nil registry")
	}
	p := &Publisher{
		js: js, nc: js.Conn(), maxPending: DefaultMaxPending, timeout: js.Options().DefaultTimeout,
		inflight: map[*nats.Msg]*inflight{}, drained: make(chan struct{}),
		g: guard{reg: reg, classify: Classify},
	}
	if p.timeout <= 0 {
		p.timeout = defaultTimeout
	}
	p.g.conn = transport.Destination{Broker: ConnectionBroker, Name: connectionName(p.nc)}
	if err := option.Apply("natsguard: NewPublisher", p, opts); err != nil {
		return nil, err
	}
	if err := p.g.conn.Validate(); err != nil {
		return nil, fmt.Errorf("natsguard: NewPublisher: the connection circuit's name: %w", err)
	}
	ajs, err := p.asyncJetStream(p.nc)
	if err != nil {
		return nil, fmt.Errorf("natsguard: NewPublisher: %w", err)
	}
	p.ajs = ajs
	p.status = p.nc.StatusChanged(nats.CLOSED)
	p.watcher.Go(p.watch)
	return p, nil
}

// connectionName is the default name of nc's circuit: its nats.Name, else the
// host:port of its first server.
func connectionName(nc *nats.Conn) string {
	if nc.Opts.Name != "" {
		return nc.Opts.Name
	}
	servers := nc.Servers()
	if len(servers) == 0 {
		return "default"
	}
	if u, err := url.Parse(servers[0]); err == nil && u.Host != "" {
		if u.Port() == "" {
			return net.JoinHostPort(u.Hostname(), "4222")
		}
		return u.Host
	}
	return "default"
}

// watch finishes the messages awaiting their acks when the connection closes for
// good; it ends then, or when Close removes its listener.
func (p *Publisher) watch() {
	for s := range p.status {
		if s == nats.CLOSED {
			p.connectionClosed()
			return
		}
	}
}

// Connection returns the destination of the connection circuit, as
// `brokerguard circuits show` names it.
func (p *Publisher) Connection() transport.Destination { return p.g.conn }

// Classifier returns the classifier of the streams' circuits (Classify unless
// WithClassifier replaced it), so that the outbox judges errors as they do.
func (p *Publisher) Classifier() transport.Classifier { return p.g.classify }

// Publish sends msgs to d's stream, one at a time, each awaiting its ack, under one
// permit of the stream's circuit (weighed by the number of messages) and one of the
// connection's; see the package documentation for subjects, headers and message ids.
// It returns nil when every message was acked, duplicates included. When the
// connection's or the stream's circuit refuses, it returns a
// *registry.RejectedError naming that circuit, without sending anything. One
// message's failure is returned as it is; for several messages it returns a
// *transport.BatchError listing those not acked (once a message fails in a way
// Classify calls a Failure, the ones after it are not sent and fail with it).
func (p *Publisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	if err := p.check(d); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return registry.NoMessagesError(d)
	}
	out, err := toMsgs(ctx, d, msgs)
	if err != nil {
		return err
	}
	return p.g.call(ctx, d, len(out), func(ctx context.Context) error {
		if len(out) == 1 {
			return p.sendSync(ctx, d, out[0])
		}
		var be *transport.BatchError
		var stop error // the Failure that ends the batch
		for i, m := range out {
			err := stop
			if err == nil {
				err = p.sendSync(ctx, d, m)
				if err != nil && p.g.classify(err) == breaker.Failure {
					stop = fmt.Errorf("natsguard: not sent after an earlier message failed: %w", err)
				}
			}
			if err != nil {
				if be == nil {
					be = &transport.BatchError{Destination: d}
				}
				be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: err})
			}
		}
		if be == nil {
			return nil
		}
		return be
	})
}

// check refuses a destination the publisher cannot send to, and any call after Close,
// before any permit is taken.
func (p *Publisher) check(d transport.Destination) error {
	if d.Broker != Broker {
		return fmt.Errorf("%w: %q has broker %q", ErrNotNATS, d.String(), d.Broker)
	}
	if err := d.Validate(); err != nil {
		return err
	}
	for i := 0; i < len(d.Name); i++ {
		switch d.Name[i] {
		case '.', '*', '>', ' ', '\t', '/', '\\':
			return &InvalidStreamError{Stream: d.Name}
		}
	}
	if p.closed.Load() {
		return ErrClosed
	}
	return nil
}

// sendSync publishes m and waits for its ack.
func (p *Publisher) sendSync(ctx context.Context, d transport.Destination, m *nats.Msg) error {
	_, err := p.js.PublishMsg(ctx, m)
	return p.result(ctx, d, m.Subject, err)
}

// result turns what nats.go said of a publish of subject into the Publisher's
// error: nil for an ack (a duplicate's too), the caller's context error as it is, and
// otherwise a *PublishError (see publishErr).
func (p *Publisher) result(ctx context.Context, d transport.Destination, subject string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return err // the caller's own: the registry's deadline rule judges it
	}
	return p.publishErr(ctx, d, subject, err)
}

// publishErr wraps err, the failure of a publish of subject to d's stream, in a
// *PublishError. A bare context deadline while the caller's context is still live
// is the JetStream context's own timeout (its DefaultTimeout, or the ack wait of an
// asynchronous publish), which becomes ErrAckTimeout. When no stream answered,
// it asks whether the stream exists: if it does, the subject is not one of its
// (ErrSubjectNotInStream).
func (p *Publisher) publishErr(ctx context.Context, d transport.Destination, subject string, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrAckTimeout),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		err = fmt.Errorf("%w (%v): %w", ErrAckTimeout, p.timeout, err)
	case errors.Is(err, jetstream.ErrNoStreamResponse) && p.streamExists(ctx, d.Name):
		err = fmt.Errorf("%w: %w", ErrSubjectNotInStream, err)
	}
	return &PublishError{Stream: d.Name, Subject: subject, Err: err}
}

// streamExists reports whether the server says the stream exists, within the
// caller's deadline and at most the JetStream context's timeout. Any failure to
// find out is a no.
func (p *Publisher) streamExists(ctx context.Context, name string) bool {
	if ctx.Err() != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	_, err := p.js.Stream(ctx, name)
	return err == nil
}

// toMsgs converts msgs for d's stream (see the package documentation).
func toMsgs(ctx context.Context, d transport.Destination, msgs []transport.Message) ([]*nats.Msg, error) {
	ids := transport.MessageIDs(ctx)
	if ids != nil && len(ids) != len(msgs) {
		ids = nil // not the ids of these messages
	}
	out := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		var id string
		if ids != nil {
			id = ids[i]
		}
		nm := new(nats.Msg)
		err := toMsg(nm, d, m, id)
		if err != nil {
			if im, ok := errors.AsType[*InvalidMessageError](err); ok {
				im.Index = i
			}
			return nil, err
		}
		out[i] = nm
	}
	return out, nil
}

// toMsg fills nm with m for d's stream: the subject is m.Key, the headers are m's
// (their order per key kept), the stream is expected (Nats-Expected-Stream) and,
// unless a header sets one, id becomes the message id (Nats-Msg-Id).
func toMsg(nm *nats.Msg, d transport.Destination, m transport.Message, id string) error {
	if !publishable(m.Key) {
		return &InvalidMessageError{Reason: fmt.Sprintf("subject %q (the message's Key) is not a subject to publish to", m.Key)}
	}
	n := len(m.Headers) + 1
	if id != "" {
		n++
	}
	// One array holds every value and one string every header value's bytes: a
	// message costs the same few allocations whatever its headers.
	vals := make([]string, n)
	var all string
	if len(m.Headers) > 0 {
		size := 0
		for _, kv := range m.Headers {
			size += len(kv.Value)
		}
		var b strings.Builder
		b.Grow(size)
		for _, kv := range m.Headers {
			b.Write(kv.Value)
		}
		all = b.String()
	}
	h := make(nats.Header, n)
	at := 0
	for i, kv := range m.Headers {
		vals[i] = all[at : at+len(kv.Value)]
		at += len(kv.Value)
		if vs, ok := h[kv.Key]; ok {
			h[kv.Key] = append(vs, vals[i]) // a repeated key: its own array, order kept
		} else {
			h[kv.Key] = vals[i : i+1 : i+1]
		}
	}
	i := len(m.Headers)
	vals[i] = d.Name
	h[jetstream.ExpectedStreamHeader] = vals[i : i+1 : i+1]
	if id != "" && len(h[jetstream.MsgIDHeader]) == 0 {
		vals[i+1] = id
		h[jetstream.MsgIDHeader] = vals[i+1 : i+2 : i+2]
	}
	nm.Subject, nm.Data, nm.Header = string(m.Key), m.Value, h
	return nil
}

// publishable reports whether subject can be published to: tokens separated by
// single dots, none empty, no wildcard and no white space.
func publishable(subject []byte) bool {
	if len(subject) == 0 || subject[0] == '.' || subject[len(subject)-1] == '.' {
		return false
	}
	for i, c := range subject {
		switch c {
		case ' ', '\t', '\r', '\n', '*', '>':
			return false
		case '.':
			if subject[i-1] == '.' {
				return false
			}
		}
	}
	return true
}

// Close stops new publishes and waits until every asynchronous message has its
// answer and its promise has run, or ctx ends. Then it gives up the messages still
// pending: their permits are completed as Neutral and their promises get ErrClosed
// (each message may or may not have been stored). It returns an error matching
// ErrClosed and ctx's error that counts them when it gave any up. It also stops the
// goroutine that watches the connection. It closes neither the JetStream context nor
// the connection. Calling Close again waits again.
func (p *Publisher) Close(ctx context.Context) error {
	p.closed.Store(true)
	if p.pending.Load() == 0 {
		p.drainOnce.Do(func() { close(p.drained) })
	}
	var cause error
	select {
	case <-p.drained:
	case <-ctx.Done():
		cause = ctx.Err()
		p.abandon()
		<-p.drained // a promise running elsewhere returns
	}
	p.nc.RemoveStatusListener(p.status)
	p.watcher.Wait()
	if cause != nil {
		return fmt.Errorf("%w: %w; gave up %d pending asynchronous message(s)", ErrClosed, cause, p.abandoned.Load())
	}
	return nil
}

// release ends the count of one asynchronous message, and after Close, once none is
// left, tells Close.
func (p *Publisher) release() {
	if p.pending.Add(-1) == 0 && p.closed.Load() {
		p.drainOnce.Do(func() { close(p.drained) })
	}
}
