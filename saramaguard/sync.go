package saramaguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Broker is the broker of every destination a producer writes to: "kafka", the same
// as the kafka package's, so a topic has one circuit whichever client writes to it.
const Broker = "kafka"

var (
	// ErrNotKafka is matched by the error of a Publish to a destination whose
	// broker is not "kafka".
	ErrNotKafka = errors.New("saramaguard: not a kafka destination")
	// ErrClosed is returned by a producer after Close or AsyncClose; sarama itself
	// would panic on a send after Close.
	ErrClosed = errors.New("saramaguard: producer closed")
)

// Option configures a producer.
type Option func(*options) error

type options struct{ classify transport.Classifier }

// WithClassifier replaces Classify as the producer's classifier.
func WithClassifier(c transport.Classifier) Option {
	return option.Check(c == nil, "saramaguard: WithClassifier(nil)", func(o *options) { o.classify = c })
}

func newOptions(opts []Option) (options, error) {
	o := options{classify: Classify}
	if err := option.Apply("saramaguard", &o, opts); err != nil {
		return o, err
	}
	return o, nil
}

// SyncProducer sends through a sarama.SyncProducer under one circuit per topic. It is
// safe for concurrent use. sarama's SyncProducer takes no context: a call lasts until
// sarama answers (bounded by its Producer.Timeout, Net timeouts and retries); the
// context decides whether the circuit admits the call and how its outcome counts.
type SyncProducer struct {
	p        sarama.SyncProducer
	reg      *registry.Registry
	classify transport.Classifier

	mu     sync.RWMutex // held shared by every send, exclusively by Close
	closed bool         // guarded by mu
	keyers sync.Map     // topic -> *keyer, for PartitionOf (partitioner.go)
}

var _ transport.Publisher = (*SyncProducer)(nil)

// NewSyncProducer makes a sarama SyncProducer for addrs with cfg (sarama.NewConfig()
// when nil) and guards it with the circuits of reg. The producer is made from a copy
// of cfg with Producer.Return.Successes set, as sarama's SyncProducer requires, and
// with [Partitioner](reg, cfg.Producer.Partitioner) as its partitioner unless cfg
// already has one made by Partitioner: so a keyed message bound for a partition whose
// broker is failing is refused at once, and an unkeyed one goes to another partition
// (see the package documentation, "Partitions and brokers"). cfg itself is left as it
// is.
func NewSyncProducer(addrs []string, cfg *sarama.Config, reg *registry.Registry, opts ...Option) (*SyncProducer, error) {
	if reg == nil {
		return nil, errors.New("saramaguard: NewSyncProducer: nil registry")
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = sarama.NewConfig()
	}
	c := *cfg
	c.Producer.Return.Successes = true
	if !isPartitioner(c.Producer.Partitioner) {
		c.Producer.Partitioner = Partitioner(reg, c.Producer.Partitioner)
	}
	p, err := sarama.NewSyncProducer(addrs, &c)
	if err != nil {
		return nil, err
	}
	return &SyncProducer{p: p, reg: reg, classify: o.classify}, nil
}

func dest(topic string) transport.Destination {
	return transport.Destination{Broker: Broker, Name: topic}
}

// SendMessage is sarama's SendMessage under msg's topic circuit: a refused call
// returns a *registry.RejectedError without touching sarama.
func (s *SyncProducer) SendMessage(ctx context.Context, msg *sarama.ProducerMessage) (partition int32, offset int64, err error) {
	return s.sendPartitioned(ctx, dest(msg.Topic), []*sarama.ProducerMessage{msg})
}

// SendError reports the messages of a SendMessages call that were not sent; the ones
// it does not list were. An entry's Err is a *registry.RejectedError when its topic's
// circuit refused, else what sarama reported for the message.
type SendError struct {
	Failed []transport.MessageError // Index is the message's position; ascending
}

// Error summarizes the failures.
func (e *SendError) Error() string {
	var b strings.Builder
	b.WriteString("saramaguard: ")
	b.WriteString(strconv.Itoa(len(e.Failed)))
	b.WriteString(" message(s) not sent")
	for i, f := range e.Failed {
		if i == 3 {
			b.WriteString("; ...")
			break
		}
		fmt.Fprintf(&b, "; [%d] %v", f.Index, f.Err)
	}
	return b.String()
}

// Unwrap returns the messages' errors, so errors.Is and errors.As look through them.
func (e *SendError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

// SendMessages is sarama's SendMessages with one permit per topic: the messages of a
// topic whose circuit refuses are not sent; the others go in one sarama call, and
// each topic's permit is completed from its messages' results. It returns nil when
// every message was sent, else a *SendError listing the others by index.
func (s *SyncProducer) SendMessages(ctx context.Context, msgs []*sarama.ProducerMessage) error {
	type group struct {
		topic   string
		start   registry.Start
		permit  registry.Permit
		refused error
		n       int
		failed  []transport.MessageError
		done    bool // the permit was completed
	}
	groups := map[string]*group{}
	var failed []transport.MessageError
	admitted := make([]*sarama.ProducerMessage, 0, len(msgs))
	defer func() { // sarama or the classifier panicked: Neutral for the permits left
		for _, g := range groups {
			if g.refused == nil && !g.done {
				s.reg.Complete(dest(g.topic), g.permit, breaker.Neutral)
			}
		}
	}()
	for i, m := range msgs {
		g, ok := groups[m.Topic]
		if !ok {
			g = &group{topic: m.Topic, start: s.reg.Start(ctx, dest(m.Topic))}
			groups[m.Topic] = g
			g.permit, g.refused = s.reg.Acquire(ctx, dest(m.Topic))
		}
		if g.refused != nil {
			failed = append(failed, transport.MessageError{Index: i, Err: g.refused})
			continue
		}
		g.n++
		admitted = append(admitted, m)
	}
	var err error
	if len(admitted) > 0 {
		err = s.sendAll(admitted)
	}
	if err != nil {
		var perrs sarama.ProducerErrors
		if !errors.As(err, &perrs) { // closed: none was sent
			for _, g := range groups {
				if g.refused == nil {
					g.failed = []transport.MessageError{{Err: err}}
					g.n = 1
				}
			}
			for i, m := range msgs {
				if groups[m.Topic].refused == nil {
					failed = append(failed, transport.MessageError{Index: i, Err: err})
				}
			}
		} else {
			at := make(map[*sarama.ProducerMessage]int, len(msgs))
			for i, m := range msgs {
				at[m] = i
			}
			for _, pe := range perrs {
				me := transport.MessageError{Index: at[pe.Msg], Err: pe.Err}
				g := groups[pe.Msg.Topic]
				g.failed = append(g.failed, me)
				failed = append(failed, me)
			}
		}
	}
	for _, g := range groups {
		if g.refused == nil {
			err := batchErr(g.topic, g.failed)
			o := registry.Outcome(ctx, g.start, err, g.n, s.classify)
			s.reg.NoteOutcome(dest(g.topic), o, err)
			g.done = true
			s.reg.Complete(dest(g.topic), g.permit, o)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	sortByIndex(failed)
	return &SendError{Failed: failed}
}

// sendAll is sarama's SendMessages, refused after Close.
func (s *SyncProducer) sendAll(msgs []*sarama.ProducerMessage) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.p.SendMessages(msgs)
}

// batchErr is one topic's failures as the registry judges them.
func batchErr(topic string, failed []transport.MessageError) error {
	if len(failed) == 0 {
		return nil
	}
	return &transport.BatchError{Destination: dest(topic), Failed: failed}
}

// Publish sends msgs to d's topic, which must be a "kafka" destination, under the
// topic's circuit: one message with SendMessage, several with SendMessages. It
// returns a *registry.RejectedError without touching sarama when the circuit
// refuses; sarama's error for a single message; a *transport.BatchError naming the
// messages that failed when several were given.
func (s *SyncProducer) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	if d.Broker != Broker {
		return fmt.Errorf("%w: %q has broker %q", ErrNotKafka, d.String(), d.Broker)
	}
	pms := make([]sarama.ProducerMessage, len(msgs))
	ptrs := make([]*sarama.ProducerMessage, len(msgs))
	for i, m := range msgs {
		toProducerMessage(&pms[i], d.Name, m)
		ptrs[i] = &pms[i]
	}
	// The registry refuses a publish of no messages (registry.ErrNoMessages).
	_, _, err := s.sendPartitioned(ctx, d, ptrs)
	return err
}

// Close closes the sarama producer, after the sends in progress have returned; later
// sends return ErrClosed.
func (s *SyncProducer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.p.Close()
}

func toProducerMessage(pm *sarama.ProducerMessage, topic string, m transport.Message) {
	pm.Topic = topic
	if m.Key != nil {
		pm.Key = sarama.ByteEncoder(m.Key)
	}
	pm.Value = sarama.ByteEncoder(m.Value)
	if len(m.Headers) > 0 {
		pm.Headers = make([]sarama.RecordHeader, len(m.Headers))
		for j, h := range m.Headers {
			pm.Headers[j] = sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value}
		}
	}
}

func sortByIndex(f []transport.MessageError) {
	slices.SortFunc(f, func(a, b transport.MessageError) int { return a.Index - b.Index })
}
