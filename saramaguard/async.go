package saramaguard

import (
	"context"
	"errors"
	"sync"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// AsyncProducer sends through a sarama.AsyncProducer under one circuit per topic.
// Send takes the message's permit and queues it; the permit is completed when sarama
// reports the message on its Successes or Errors channel, which the AsyncProducer
// reads in two goroutines of its own and forwards, unchanged, to its own Successes
// and Errors. Read both, as sarama requires with Return.Successes set. The goroutines
// end, and both channels close, once the sarama producer has closed its channels
// after Close or AsyncClose; every permit still pending then is completed as
// Neutral.
type AsyncProducer struct {
	p        sarama.AsyncProducer
	reg      *registry.Registry
	classify transport.Classifier

	successes chan *sarama.ProducerMessage
	errors    chan *sarama.ProducerError

	mu      sync.RWMutex      // held shared by Send while it queues, exclusively by AsyncClose
	closed  bool              // guarded by mu
	pmu     sync.Mutex        // guards pending
	pending map[*tag]struct{} // messages queued and not reported yet
}

// tag is what the AsyncProducer puts in a queued message's Metadata.
type tag struct {
	dest   transport.Destination
	permit registry.Permit
	user   any // the caller's Metadata, given back before the message is forwarded
}

// NewAsyncProducer makes a sarama AsyncProducer for addrs and guards it; see
// NewAsyncProducerFromClient.
func NewAsyncProducer(addrs []string, cfg *sarama.Config, reg *registry.Registry, opts ...Option) (*AsyncProducer, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	p, err := sarama.NewAsyncProducer(addrs, cfg)
	if err != nil {
		return nil, err
	}
	return newAsync(p, cfg.ChannelBufferSize, reg, opts)
}

// NewAsyncProducerFromClient makes a sarama AsyncProducer over client and guards it
// with the circuits of reg. The client's configuration must set
// Producer.Return.Successes and Producer.Return.Errors: a permit is completed only
// when sarama reports its message.
func NewAsyncProducerFromClient(client sarama.Client, reg *registry.Registry, opts ...Option) (*AsyncProducer, error) {
	if client == nil {
		return nil, errors.New("saramaguard: NewAsyncProducerFromClient: nil client")
	}
	if err := checkConfig(client.Config()); err != nil {
		return nil, err
	}
	p, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, err
	}
	return newAsync(p, client.Config().ChannelBufferSize, reg, opts)
}

func checkConfig(cfg *sarama.Config) error {
	switch {
	case cfg == nil:
		return errors.New("saramaguard: nil sarama config")
	case !cfg.Producer.Return.Successes:
		return errors.New("saramaguard: the config must set Producer.Return.Successes: a permit completes when sarama reports its message")
	case !cfg.Producer.Return.Errors:
		return errors.New("saramaguard: the config must set Producer.Return.Errors: a permit completes when sarama reports its message")
	}
	return nil
}

// newAsync guards p; its channels buffer as many reports as sarama's own do.
func newAsync(p sarama.AsyncProducer, buffer int, reg *registry.Registry, opts []Option) (*AsyncProducer, error) {
	o, err := newOptions(opts)
	if err == nil && reg == nil {
		err = errors.New("saramaguard: nil registry")
	}
	if err != nil {
		p.AsyncClose()
		return nil, err
	}
	a := &AsyncProducer{
		p: p, reg: reg, classify: o.classify,
		successes: make(chan *sarama.ProducerMessage, buffer), errors: make(chan *sarama.ProducerError, buffer),
		pending: map[*tag]struct{}{},
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for m := range p.Successes() {
			a.successes <- a.report(m, nil)
		}
	})
	wg.Go(func() {
		for pe := range p.Errors() {
			pe.Msg = a.report(pe.Msg, pe.Err)
			a.errors <- pe
		}
	})
	go func() {
		wg.Wait()
		a.abandon()
		close(a.successes)
		close(a.errors)
	}()
	return a, nil
}

// Send queues msg under its topic's circuit. It returns a *registry.RejectedError
// without queueing when the circuit refuses, ErrClosed after AsyncClose, and ctx's
// error when ctx ends while sarama's input is full (the message was not queued).
// A nil error means sarama has the message; its result comes on Successes or Errors,
// with the Metadata it had.
func (a *AsyncProducer) Send(ctx context.Context, msg *sarama.ProducerMessage) error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return ErrClosed
	}
	d := dest(msg.Topic)
	permit, err := a.reg.Acquire(ctx, d)
	if err != nil {
		return err
	}
	t := &tag{dest: d, permit: permit, user: msg.Metadata}
	a.pmu.Lock()
	a.pending[t] = struct{}{}
	a.pmu.Unlock()
	msg.Metadata = t
	select {
	case a.p.Input() <- msg:
		return nil
	case <-ctx.Done():
		msg.Metadata = t.user
		a.forget(t, breaker.Neutral)
		return ctx.Err()
	}
}

// report completes the permit of a message sarama reported, with err's outcome, and
// gives the message its own Metadata back.
func (a *AsyncProducer) report(m *sarama.ProducerMessage, err error) *sarama.ProducerMessage {
	t, ok := m.Metadata.(*tag)
	if !ok {
		return m
	}
	m.Metadata = t.user
	// Once queued, the message is sarama's: the caller's context no longer counts.
	a.forget(t, registry.Outcome(context.Background(), registry.Start{}, err, 1, a.classify))
	return m
}

// forget drops a pending message and completes its permit with o, unless it was
// dropped already.
func (a *AsyncProducer) forget(t *tag, o breaker.Outcome) {
	a.pmu.Lock()
	_, live := a.pending[t]
	delete(a.pending, t)
	a.pmu.Unlock()
	if live {
		a.reg.Complete(t.dest, t.permit, o)
	}
}

// abandon completes every pending permit as Neutral.
func (a *AsyncProducer) abandon() {
	a.pmu.Lock()
	left := a.pending
	a.pending = map[*tag]struct{}{}
	a.pmu.Unlock()
	for t := range left {
		a.reg.Complete(t.dest, t.permit, breaker.Neutral)
	}
}

// Successes is where the messages sarama acknowledged come, with their own Metadata.
func (a *AsyncProducer) Successes() <-chan *sarama.ProducerMessage { return a.successes }

// Errors is where the messages sarama failed come, with their own Metadata.
func (a *AsyncProducer) Errors() <-chan *sarama.ProducerError { return a.errors }

// AsyncClose stops Send and asks sarama to flush and close; Successes and Errors
// close once sarama has reported every queued message. It first waits for the Sends
// in progress to hand their message to sarama (or give up with their context).
func (a *AsyncProducer) AsyncClose() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.closed = true
		a.p.AsyncClose()
	}
}

// Close is AsyncClose, then waits for the channels to close, draining them; it
// returns the failed messages as sarama.ProducerErrors, as sarama's Close does.
func (a *AsyncProducer) Close() error {
	a.AsyncClose()
	var errs sarama.ProducerErrors
	successes, failures := a.successes, a.errors
	for successes != nil || failures != nil {
		select {
		case _, ok := <-successes:
			if !ok {
				successes = nil
			}
		case pe, ok := <-failures:
			if !ok {
				failures = nil
			} else {
				errs = append(errs, pe)
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
