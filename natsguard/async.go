package natsguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/transport"
)

// inflight is one asynchronous message that was sent and awaits its ack: the
// message nats.go sends, its permits and its promise, in one allocation. It is in
// Publisher.inflight, under &msg, from just before its send until the one that takes
// it out (take) finishes it: nats.go's ack or error handler (which get &msg back),
// the watcher when the connection closes, or Close when it gives the message up.
type inflight struct {
	msg     nats.Msg
	t       ticket
	promise func(*jetstream.PubAck, error)
}

// errAbandoned is what a message Close gave up gets.
var errAbandoned = fmt.Errorf("%w before the message's ack came; it may or may not have been stored", ErrClosed)

// asyncJetStream returns the JetStream context that sends the Publisher's
// asynchronous messages, on nc: its ack and error handlers finish them, its bound of
// pending acks is the Publisher's, and its ack timeout the Publisher's timeout.
// Publishing does not depend on the API prefix or domain of the caller's context.
func (p *Publisher) asyncJetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	return jetstream.New(nc,
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
			if x := p.take(m); x != nil {
				p.finish(x, ack, nil)
			}
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			if x := p.take(m); x != nil {
				if errors.Is(err, jetstream.ErrNoStreamResponse) {
					// Finding out whether the stream exists is a request: not on the
					// goroutine that reads every ack.
					go p.finish(x, nil, err)
					return
				}
				p.finish(x, nil, err)
			}
		}),
		jetstream.WithPublishAsyncMaxPending(int(p.maxPending)),
		jetstream.WithPublishAsyncTimeout(p.timeout),
		jetstream.WithDefaultTimeout(p.timeout))
}

// PublishAsync sends msg to d's stream without waiting for its ack, under a permit of
// the stream's circuit and one of the connection's, both completed exactly once when
// the message's answer comes: its ack, the server's error, the end of the wait when
// the connection reconnects (nats.ErrDisconnected) or closes
// (nats.ErrConnectionClosed), or the JetStream context's timeout ([ErrAckTimeout]).
//
// It returns nil once the message is sent, and then calls promise (which may be nil)
// exactly once with the ack or the error, after the permits are completed. promise
// runs on nats.go's goroutines (the one that reads the acks, above all), or in Close:
// it must not block. It returns an error, and never calls promise, when the message
// was not sent: a destination or message it cannot take, Close, a circuit's refusal
// (*registry.RejectedError), ErrTooManyPending when the bound of WithMaxPending is
// reached (at once, without waiting for room), or what nats.go refused to send (a
// closed connection, say). ctx governs the admission and the send; once the message
// is sent its wait is bounded by the JetStream context's timeout, not by ctx.
//
// The message's id (Nats-Msg-Id) is the single id of transport.MessageIDs(ctx), if
// any, unless a header sets it.
func (p *Publisher) PublishAsync(ctx context.Context, d transport.Destination, msg transport.Message, promise func(*jetstream.PubAck, error)) error {
	if err := p.check(d); err != nil {
		return err
	}
	var id string
	if ids := transport.MessageIDs(ctx); len(ids) == 1 {
		id = ids[0]
	}
	x := &inflight{promise: promise}
	m := &x.msg
	if err := toMsg(m, d, msg, id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The message counts as pending from here, so that Close waits for what it sends.
	if p.pending.Add(1) > p.maxPending {
		p.release()
		return fmt.Errorf("%w (WithMaxPending %d)", ErrTooManyPending, p.maxPending)
	}
	if p.closed.Load() {
		p.release()
		return ErrClosed
	}
	if err := p.g.begin(ctx, d, &x.t); err != nil {
		p.release()
		return err
	}
	// In the map before the send: its ack may come before PublishMsgAsync returns.
	p.amu.Lock()
	p.inflight[m] = x
	p.amu.Unlock()
	_, err := p.ajs.PublishMsgAsync(m)
	if err == nil {
		if p.abandoning.Load() {
			p.abandon() // Close gave up the others while this one was being sent
		}
		return nil
	}
	if p.take(m) == nil {
		return nil // the watcher or Close took it meanwhile, and finishes it
	}
	err = p.result(ctx, d, m.Subject, err)
	p.g.end(ctx, &x.t, err)
	p.release()
	return err
}

// take removes m's entry from the messages awaiting their acks and returns it, or
// nil when another took it: whoever takes an entry finishes it, exactly once.
func (p *Publisher) take(m *nats.Msg) *inflight {
	p.amu.Lock()
	x := p.inflight[m]
	delete(p.inflight, m)
	p.amu.Unlock()
	return x
}

// takeAll removes every entry awaiting its ack and returns them.
func (p *Publisher) takeAll() []*inflight {
	p.amu.Lock()
	xs := make([]*inflight, 0, len(p.inflight))
	for m, x := range p.inflight {
		xs = append(xs, x)
		delete(p.inflight, m)
	}
	p.amu.Unlock()
	return xs
}

// finish completes x's permits for its answer, ack or err, and calls its promise.
func (p *Publisher) finish(x *inflight, ack *jetstream.PubAck, err error) {
	// The wait for the answer was bounded by the timeout, not by the caller's
	// context: the answer is judged alone.
	ctx := context.Background()
	if err != nil {
		ack = nil
		err = p.result(ctx, x.t.d, x.msg.Subject, err)
	}
	p.g.end(ctx, &x.t, err)
	if x.promise != nil {
		x.promise(ack, err)
	}
	p.release()
}

// abandon gives up every message awaiting its ack: Neutral for the circuits, and
// errAbandoned for the promises.
func (p *Publisher) abandon() {
	p.abandoning.Store(true)
	for _, x := range p.takeAll() {
		p.g.drop(&x.t)
		p.abandoned.Add(1)
		if x.promise != nil {
			x.promise(nil, errAbandoned)
		}
		p.release()
	}
}

// connectionClosed finishes every message awaiting its ack with
// nats.ErrConnectionClosed: nats.go ends no pending ack when the connection closes.
func (p *Publisher) connectionClosed() {
	for _, x := range p.takeAll() {
		p.finish(x, nil, nats.ErrConnectionClosed)
	}
}
