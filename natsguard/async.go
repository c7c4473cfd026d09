package natsguard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/transport"
)

// lane awaits the acks of one stream's asynchronous messages in the order they were
// sent. JetStream answers one stream's publishes in order, so waiting on the oldest
// loses no time, and a stream that stops answering holds up its own lane only. A
// lane's goroutine runs while its queue has messages and ends when it is empty.
type lane struct {
	q       []*inflight // guarded by Publisher.mu
	running bool        // a goroutine drains q; guarded by Publisher.mu
}

// inflight is one asynchronous message awaiting its ack.
type inflight struct {
	ctx      context.Context // the caller's, whose end also ends the wait
	f        jetstream.PubAckFuture
	t        ticket
	subject  string
	deadline time.Time // the JetStream context's timeout after the send
	promise  func(*jetstream.PubAck, error)
}

// errAbandoned is what a message Close gave up gets.
var errAbandoned = fmt.Errorf("%w before the message's ack came; it may or may not have been stored", ErrClosed)

// PublishAsync sends msg to d's stream without waiting for its ack, under a permit of
// the stream's circuit and one of the connection's, both completed exactly once from
// the message's PubAckFuture: when its ack or its error comes, when the
// connection's reconnection or close ends the wait (nats.ErrDisconnected,
// nats.ErrConnectionClosed), when ctx ends, or when the JetStream context's timeout
// passes (ErrAckTimeout) — whichever comes first.
//
// It returns nil once the message is sent, and then calls promise (which may be nil)
// exactly once with the ack or the error, from the stream's own goroutine, after the
// permits are completed: promise must not block for long, as the stream's later acks
// wait for it, and ctx must live until promise is called (ending it ends the wait, as
// franz-go's record contexts do). It returns an error, and never calls promise, when
// the message was not sent: a destination or message it cannot take, Close, a
// circuit's refusal (*registry.RejectedError), ErrTooManyPending when the bound of
// WithMaxPending is reached (at once, without waiting for room), or what nats.go
// refused to send (a closed connection, jetstream.ErrTooManyStalledMsgs after
// waiting for room no longer than ctx allows).
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
	m, err := toMsg(d, msg, id)
	if err != nil {
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
	t, err := p.g.begin(ctx, d)
	if err != nil {
		p.release()
		return err
	}
	var opts []jetstream.PublishOpt
	if dl, ok := ctx.Deadline(); ok {
		switch wait := time.Until(dl); {
		case wait <= 0:
			err = context.DeadlineExceeded
		case wait < stallWait: // nats.go's own wait would outlast the caller's deadline
			opts = []jetstream.PublishOpt{jetstream.WithStallWait(wait)}
		}
	}
	var f jetstream.PubAckFuture
	if err == nil {
		f, err = p.js.PublishMsgAsync(m, opts...)
	}
	if err != nil {
		err = p.result(ctx, d, m.Subject, err)
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			// This process's own saturation, even when the wait for room ended with the
			// caller's deadline: nothing went to the server, nothing to judge.
			p.g.drop(&t)
		} else {
			p.g.end(ctx, &t, err)
		}
		p.release()
		return err
	}
	p.enqueue(&inflight{ctx: ctx, f: f, t: t, subject: m.Subject, deadline: time.Now().Add(p.timeout), promise: promise})
	return nil
}

// enqueue puts x at the end of its stream's lane and starts the lane's goroutine if
// it does not run. The caller holds a count of pending, so Close has not reached its
// wait for the lanes yet.
func (p *Publisher) enqueue(x *inflight) {
	p.mu.Lock()
	l := p.lanes[x.t.d]
	if l == nil {
		l = &lane{}
		p.lanes[x.t.d] = l
	}
	l.q = append(l.q, x)
	start := !l.running
	if start {
		l.running = true
		p.lanesG.Add(1)
	}
	p.mu.Unlock()
	if start {
		go p.drain(l)
	}
}

// drain settles l's messages in order until its queue is empty.
func (p *Publisher) drain(l *lane) {
	defer p.lanesG.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		p.mu.Lock()
		if len(l.q) == 0 {
			l.running = false
			l.q = nil
			p.mu.Unlock()
			return
		}
		x := l.q[0]
		l.q[0] = nil
		l.q = l.q[1:]
		p.mu.Unlock()
		p.settle(x, timer)
	}
}

// settle waits for x's answer, completes its permits and calls its promise: the one
// place an admitted asynchronous message is finished.
func (p *Publisher) settle(x *inflight, timer *time.Timer) {
	ack, err := p.await(x, timer)
	if errors.Is(err, errAbandoned) {
		p.g.drop(&x.t)
		p.abandoned.Add(1)
	} else {
		if err != nil {
			ack = nil
			err = p.result(x.ctx, x.t.d, x.subject, err)
		}
		p.g.end(x.ctx, &x.t, err)
	}
	if x.promise != nil {
		x.promise(ack, err)
	}
	p.release()
}

// await returns x's ack or the error that ends the wait for it.
func (p *Publisher) await(x *inflight, timer *time.Timer) (*jetstream.PubAck, error) {
	ok, failed := x.f.Ok(), x.f.Err()
	select { // an answer already in wins over a deadline that has passed meanwhile
	case ack := <-ok:
		return ack, nil
	case err := <-failed:
		return nil, err
	default:
	}
	timer.Reset(time.Until(x.deadline))
	defer timer.Stop()
	select {
	case ack := <-ok:
		return ack, nil
	case err := <-failed:
		return nil, err
	case <-x.ctx.Done():
		return nil, x.ctx.Err()
	case <-timer.C:
		return nil, fmt.Errorf("%w (%v): %w", ErrAckTimeout, p.timeout, context.DeadlineExceeded)
	case <-p.connClosed:
		return nil, nats.ErrConnectionClosed
	case <-p.abandon:
		return nil, errAbandoned
	}
}
