package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Broker is the broker of every destination a Publisher writes to: "kafka".
const Broker = "kafka"

// DefaultCloseTimeout bounds Publisher.Close when no WithCloseTimeout is given.
const DefaultCloseTimeout = 10 * time.Second

var (
	// ErrNotKafka is matched by the error of a Publish to a destination whose
	// broker is not "kafka".
	ErrNotKafka = errors.New("kafka: not a kafka destination")
	// ErrTopic is matched by the errors of messages whose topic the writer cannot
	// take: a topic other than the writer's fixed Topic, or no topic at all.
	ErrTopic = errors.New("kafka: topic does not fit the writer")
	// ErrClosed is returned by a Publisher after Close.
	ErrClosed = errors.New("kafka: publisher closed")
	// ErrStillFlushing is matched by the error of a Close that stopped waiting while
	// the writer was still writing queued messages.
	ErrStillFlushing = errors.New("kafka: writer still flushing")
)

// Option configures a Publisher.
type Option func(*Publisher) error

// WithClassifier replaces Classify as the publisher's classifier.
func WithClassifier(c transport.Classifier) Option {
	return option.Check(c == nil, "kafka: WithClassifier(nil)", func(p *Publisher) { p.classify = c })
}

// WithCloseTimeout sets how long Close waits for the writer at most, whatever its
// context says. The default is DefaultCloseTimeout.
func WithCloseTimeout(d time.Duration) Option {
	return option.Check(d <= 0, fmt.Sprintf("kafka: WithCloseTimeout(%v): the timeout must be positive", d), func(p *Publisher) { p.closeTimeout = d })
}

// Publisher writes through a kafka-go Writer under one circuit per topic. It is safe
// for concurrent use. Create it before the Writer is first used and change no field
// of the Writer afterwards.
type Publisher struct {
	w            *kafkago.Writer
	reg          *registry.Registry
	classify     transport.Classifier
	closeTimeout time.Duration
	async        *tracker  // nil unless the writer is asynchronous
	bal          *balancer // the writer's Balancer (partitions.go)
	all          allCache  // 0..n-1 for routing before a write
	// fireAndForget accepts RequiredAcks RequireNone (WithFireAndForget).
	fireAndForget bool

	closed    atomic.Bool
	closeOnce sync.Once
	flushed   chan struct{} // closed when the writer's Close has returned
}

var _ transport.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher that writes through w, with the circuits of reg.
// It sets w.Balancer to its own, which asks the Balancer set before (kafka-go's
// RoundRobin when none) and steers unkeyed messages away from the topic's isolated
// partitions (registry.Partitions; see docs/partitions.md).
// For an asynchronous writer (w.Async) it sets w.Completion to its own function,
// which calls the Completion set before. It refuses a writer whose RequiredAcks is
// RequireNone, kafka-go's default, unless WithFireAndForget says so: the broker would
// answer nothing and its errors would never reach the circuit. NewWriter makes a
// writer with the recommended settings.
func NewPublisher(w *kafkago.Writer, reg *registry.Registry, opts ...Option) (*Publisher, error) {
	switch {
	case w == nil:
		return nil, errors.New("kafka: NewPublisher: nil writer")
	case w.Addr == nil:
		return nil, errors.New("kafka: NewPublisher: the writer has no Addr")
	case reg == nil:
		return nil, errors.New("kafka: NewPublisher: nil registry")
	}
	p := &Publisher{w: w, reg: reg, classify: Classify, closeTimeout: DefaultCloseTimeout, flushed: make(chan struct{})}
	if err := option.Apply("kafka: NewPublisher", p, opts); err != nil {
		return nil, err
	}
	if w.RequiredAcks == kafkago.RequireNone && !p.fireAndForget {
		return nil, errors.New("kafka: NewPublisher: the writer's RequiredAcks is RequireNone (kafka-go's default), " +
			"so the broker's errors would never reach the circuit: set RequiredAcks to kafkago.RequireAll " +
			"(kafka.NewWriter does), or pass kafka.WithFireAndForget() to accept it")
	}
	if w.Topic != "" {
		if err := (transport.Destination{Broker: Broker, Name: w.Topic}).Validate(); err != nil {
			return nil, fmt.Errorf("kafka: NewPublisher: the writer's topic: %w", err)
		}
	}
	inner := w.Balancer
	if b, ok := inner.(*balancer); ok { // a writer given to NewPublisher before
		inner = b.inner
	}
	if inner == nil {
		inner = &kafkago.RoundRobin{} // the writer's own default
	}
	p.bal = &balancer{p: p, inner: inner, byKey: keysPartitions(inner)}
	w.Balancer = p.bal
	if w.Async {
		p.async = &tracker{reg: reg, classify: p.classify, next: w.Completion, pending: map[*call]struct{}{}}
		w.Completion = p.async.completion
	}
	return p, nil
}

// Publish writes msgs to d's topic, which must be a "kafka" destination (and the
// writer's topic, when it has a fixed one). It returns a *registry.RejectedError
// without touching the writer when the topic's circuit refuses the call. When some
// messages were not written it returns a *transport.BatchError whose entries are
// *WriteError values; other failures of the writer are a *WriteError, and the
// caller's context error is returned as is. With an asynchronous writer a nil error
// means the messages were queued.
//
// With a synchronous writer each call also keeps the evidence of the partitions it
// reaches: a keyed message bound for an isolated partition is refused with a
// *registry.PartitionRejectedError (errors.Is(err, breaker.ErrOpen)), in a
// *transport.BatchError beside the others' outcomes when the call had several
// messages, and a failure of some partitions does not count against the topic while
// others answer.
func (p *Publisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	if ctx == nil {
		return errors.New("kafka: Publish: nil context")
	}
	if d.Broker != Broker {
		return fmt.Errorf("%w: %q has broker %q", ErrNotKafka, d.String(), d.Broker)
	}
	if p.w.Topic != "" && d.Name != p.w.Topic {
		return fmt.Errorf("%w: destination %s, but the writer writes only to %q", ErrTopic, d, p.w.Topic)
	}
	if p.closed.Load() {
		return ErrClosed
	}
	if len(msgs) == 0 {
		return registry.NoMessagesError(d)
	}
	kmsgs := make([]kafkago.Message, len(msgs))
	topic := d.Name
	if p.w.Topic != "" {
		topic = "" // kafka-go wants the topic on the writer or on the message, not both
	}
	for i, m := range msgs {
		km := &kmsgs[i]
		km.Topic, km.Key, km.Value = topic, m.Key, m.Value
		if len(m.Headers) > 0 {
			km.Headers = make([]kafkago.Header, len(m.Headers))
			for j, h := range m.Headers {
				km.Headers[j] = kafkago.Header{Key: h.Key, Value: h.Value}
			}
		}
	}
	if p.async == nil {
		return p.writePartitioned(ctx, d, kmsgs)
	}
	return p.write(ctx, d, kmsgs)
}

// TopicError is the failure of one topic's messages in a WriteMessages call.
type TopicError struct {
	Topic string
	// Indexes are the positions, in the messages given to WriteMessages, of this
	// topic's messages that were not written (all of them unless Err is a
	// *transport.BatchError), ascending.
	Indexes []int
	// Err is a *registry.RejectedError when the topic's circuit refused the call,
	// else what Publish would have returned.
	Err error
}

// TopicsError reports the topics of a WriteMessages call whose messages were not all
// written; the topics it does not list were written. errors.Is and errors.As look
// through every topic's error, so errors.Is(err, breaker.ErrOpen) holds when a topic
// was rejected by its circuit.
type TopicsError struct {
	Topics []TopicError // in the order the topics first appear in the messages
}

// Error lists the failed topics and their errors.
func (e *TopicsError) Error() string {
	var b strings.Builder
	b.WriteString("kafka: ")
	b.WriteString(strconv.Itoa(len(e.Topics)))
	b.WriteString(" topic(s) not written")
	for _, t := range e.Topics {
		b.WriteString("; ")
		b.WriteString(t.Topic)
		b.WriteString(" (")
		b.WriteString(strconv.Itoa(len(t.Indexes)))
		b.WriteString(" message(s)): ")
		b.WriteString(t.Err.Error())
	}
	return b.String()
}

// Unwrap returns each topic's error.
func (e *TopicsError) Unwrap() []error {
	errs := make([]error, len(e.Topics))
	for i, t := range e.Topics {
		errs[i] = t.Err
	}
	return errs
}

// WriteMessages writes kafka-go messages that may go to several topics, each topic
// under its own circuit: the topics whose circuit is open are rejected without
// touching the writer, the others are written, each with its own call to the writer
// (concurrently when there are several, so that a slow topic does not hold the
// others' results back). It returns nil when every message was written (queued, for an
// asynchronous writer), else a *TopicsError. Messages must name their topic, unless
// the writer has a fixed Topic, in which case none may. The messages are not
// modified.
func (p *Publisher) WriteMessages(ctx context.Context, msgs ...kafkago.Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if len(msgs) == 0 {
		return fmt.Errorf("%w: kafka: WriteMessages was given none", registry.ErrNoMessages)
	}
	topic, groups, err := p.groupByTopic(msgs)
	if err != nil {
		return err
	}
	if groups == nil { // one topic: no copies, no goroutine
		err := p.write(ctx, transport.Destination{Broker: Broker, Name: topic}, msgs)
		if err == nil {
			return nil
		}
		g := topicGroup{topic: topic}
		return &TopicsError{Topics: []TopicError{{Topic: topic, Indexes: g.failed(err, len(msgs)), Err: err}}}
	}
	errs := make([]error, len(groups))
	writeGroup := func(i int) {
		g := &groups[i]
		batch := make([]kafkago.Message, len(g.indexes))
		for j, k := range g.indexes {
			batch[j] = msgs[k]
		}
		errs[i] = p.write(ctx, transport.Destination{Broker: Broker, Name: g.topic}, batch)
	}
	if p.async != nil {
		for i := range groups {
			writeGroup(i)
		}
	} else {
		// Each further topic is written in a goroutine of its own; a panic there is
		// carried to the caller, as it would be for a single topic, instead of
		// crashing the process (the topic's permit is already completed Neutral).
		var wg sync.WaitGroup
		var panicked atomic.Pointer[any]
		for i := 1; i < len(groups); i++ {
			wg.Go(func() {
				defer func() {
					if r := recover(); r != nil {
						panicked.CompareAndSwap(nil, &r)
					}
				}()
				writeGroup(i)
			})
		}
		writeGroup(0)
		wg.Wait()
		if r := panicked.Load(); r != nil {
			panic(*r)
		}
	}
	var te *TopicsError
	for i, err := range errs {
		if err == nil {
			continue
		}
		if te == nil {
			te = &TopicsError{}
		}
		te.Topics = append(te.Topics, TopicError{Topic: groups[i].topic, Indexes: groups[i].failed(err, len(msgs)), Err: err})
	}
	if te == nil {
		return nil
	}
	return te
}

// topicGroup is one topic's messages in a WriteMessages call.
type topicGroup struct {
	topic   string
	indexes []int // positions in the call's messages; nil when the call has only this topic
}

// failed returns the positions of the group's messages that err says were not
// written.
func (g *topicGroup) failed(err error, n int) []int {
	var be *transport.BatchError
	all := g.indexes
	if all == nil {
		all = make([]int, n)
		for i := range all {
			all[i] = i
		}
	}
	if !errors.As(err, &be) {
		return all
	}
	out := make([]int, len(be.Failed))
	for i, f := range be.Failed {
		out[i] = all[f.Index]
	}
	return out
}

// groupByTopic splits msgs per topic, refusing messages whose topic the writer
// cannot take before anything is written. When every message goes to one topic it
// returns that topic and no groups.
func (p *Publisher) groupByTopic(msgs []kafkago.Message) (string, []topicGroup, error) {
	if p.w.Topic != "" {
		for i, m := range msgs {
			if m.Topic != "" {
				return "", nil, fmt.Errorf("%w: message %d names topic %q, but the writer has the fixed topic %q", ErrTopic, i, m.Topic, p.w.Topic)
			}
		}
		return p.w.Topic, nil, nil
	}
	first := msgs[0].Topic
	single := true
	for i, m := range msgs {
		if m.Topic == "" {
			return "", nil, fmt.Errorf("%w: message %d names no topic and the writer has none", ErrTopic, i)
		}
		single = single && m.Topic == first
	}
	if single {
		return first, nil, nil
	}
	var groups []topicGroup
	at := map[string]int{}
	for i, m := range msgs {
		k, ok := at[m.Topic]
		if !ok {
			k = len(groups)
			at[m.Topic] = k
			groups = append(groups, topicGroup{topic: m.Topic})
		}
		groups[k].indexes = append(groups[k].indexes, i)
	}
	return "", groups, nil
}

// write writes one topic's messages under the topic's circuit, completing the permit
// exactly once on every path (for an asynchronous writer, when the writer reports).
func (p *Publisher) write(ctx context.Context, d transport.Destination, msgs []kafkago.Message) error {
	if p.async != nil {
		if len(msgs) == 0 { // no Completion would ever come for it
			return registry.NoMessagesError(d)
		}
		start := p.reg.Start(ctx, d)
		permit, err := p.reg.Acquire(ctx, d)
		if err != nil {
			return err
		}
		return p.async.write(ctx, p, permit, start, d, msgs)
	}
	return p.reg.CallHeld(ctx, d, len(msgs), p.batchHold(), p.classify, func(ctx context.Context) error {
		return p.writeErr(ctx, d, p.w.WriteMessages(ctx, msgs...))
	})
}

// batchHold is how long the writer may keep a synchronous write's messages before it
// sends them: its BatchTimeout (kafka-go's default 1s) for a batch that does not fill,
// and a batch fills at once only with BatchSize 1. A caller's deadline that passes in
// that time is the writer's batching, not a broker that failed to answer.
func (p *Publisher) batchHold() time.Duration {
	switch {
	case p.w.BatchSize == 1:
		return 0
	case p.w.BatchTimeout <= 0:
		return time.Second
	}
	return p.w.BatchTimeout
}

// writeErr turns what the writer returned into the Publisher's errors: per-message
// failures become a *transport.BatchError of *WriteError, a context error stays as it
// is when the caller's context has ended, and any other error becomes a *WriteError.
func (p *Publisher) writeErr(ctx context.Context, d transport.Destination, err error) error {
	if err == nil {
		return nil
	}
	var we kafkago.WriteErrors
	if errors.As(err, &we) {
		be := &transport.BatchError{Destination: d, Failed: make([]transport.MessageError, 0, we.Count())}
		for i, e := range we {
			if e != nil {
				be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: &WriteError{Topic: d.Name, Err: e}})
			}
		}
		return be
	}
	if isContextErr(err) && ctx.Err() != nil { // the caller's own: stays as it is, Neutral
		return err
	}
	// Anything else, a bare deadline included (a custom Transport's timeout while the
	// caller still waits), is the writer's: a Failure.
	return &WriteError{Topic: d.Name, Err: err}
}

// Close stops new writes and closes the writer, which writes what it has queued. It
// waits until the writer is closed, ctx ends or the close timeout passes, whichever
// comes first. When it stops waiting early it completes the permits of the
// asynchronous writes still pending as Neutral and returns an error matching
// ErrStillFlushing (and ctx's error, when ctx ended); the writer's Close goes on in a
// goroutine until kafka-go gives up its retries, and Flushed reports when it has.
// Calling Close again waits again.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		go func() {
			defer close(p.flushed)
			p.w.Close() // kafka-go's Close always returns nil
		}()
	})
	timer := time.NewTimer(p.closeTimeout)
	defer timer.Stop()
	var cause error
	select {
	case <-p.flushed:
		return nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-timer.C:
		cause = fmt.Errorf("close timeout %v passed", p.closeTimeout)
	}
	abandoned := 0
	if p.async != nil {
		abandoned = p.async.abandon()
	}
	return fmt.Errorf("%w: %w; gave up %d pending asynchronous write(s)", ErrStillFlushing, cause, abandoned)
}

// Flushed returns a channel closed once the writer's own Close has returned, after
// Close was called: from then on the writer has no goroutine left.
func (p *Publisher) Flushed() <-chan struct{} { return p.flushed }
