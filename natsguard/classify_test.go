package natsguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/natsguard"
	"github.com/brokerguard/brokerguard/transport"
)

// How a row's call was counted by its stream's circuit.
const (
	countedPublished = "published"
	countedFailed    = "failed"
	countedNeutral   = "neutral"
	countedNone      = "none" // refused before any permit was taken
)

// classRow is one row of the classification table: do produces it with the real
// server and returns the publish's error and its destination.
type classRow struct {
	name    string
	do      func(t *testing.T, e *env) (transport.Destination, error)
	is      error // errors.Is target; nil for a row whose publish succeeds
	want    breaker.Outcome
	counted string
}

// checkRow checks a row's error err, of a publish to d: what it matches, Classify's
// outcome and how d's circuit counted the call.
func checkRow(t *testing.T, e *env, r classRow, err error, d transport.Destination) {
	t.Helper()
	if r.is == nil && err != nil || r.is != nil && !errors.Is(err, r.is) {
		t.Fatalf("error %v (%T), want one matching %v", err, err, r.is)
	}
	if got := natsguard.Classify(err); got != r.want {
		t.Errorf("Classify(%v) = %v, want %v", err, got, r.want)
	}
	c := e.calls(d)
	got := countedNone
	switch {
	case c.Published == 1:
		got = countedPublished
	case c.Failed == 1:
		got = countedFailed
	case c.Neutral == 1:
		got = countedNeutral
	}
	if c.Total() > 1 || got != r.counted {
		t.Errorf("the stream's circuit counted %+v, want one call %s", c, r.counted)
	}
	e.idle(d)
	t.Logf("%v -> %v", err, natsguard.Classify(err))
}

// publishOne publishes one message to subject of d through e's publisher.
func publishOne(ctx context.Context, e *env, d transport.Destination, subject string, value []byte, hs ...transport.Header) error {
	return e.p.Publish(ctx, d, transport.Message{Key: []byte(subject), Value: value, Headers: hs})
}

// The rows the machine's server produces without any fault.
func TestClassificationAgainstTheServer(t *testing.T) {
	url := machine(t)
	ctx := context.Background()
	rows := []classRow{
		{name: "acked", want: breaker.Success, counted: countedPublished,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "ok", jetstream.StreamConfig{})
				return d, publishOne(ctx, e, d, subj("a"), []byte("x"))
			}},
		{name: "duplicate acked (same Nats-Msg-Id)", want: breaker.Success, counted: countedPublished,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "dup", jetstream.StreamConfig{})
				if _, err := e.js.Publish(ctx, subj("a"), []byte("x"), jetstream.WithMsgID("row-1")); err != nil {
					t.Fatal(err)
				}
				err := publishOne(transport.WithMessageIDs(ctx, []string{"row-1"}), e, d, subj("a"), []byte("x"))
				if n := stored(t, e.js, d); n != 1 {
					t.Errorf("the stream holds %d messages, want 1", n)
				}
				return d, err
			}},
		{name: "no stream of that name", is: jetstream.ErrNoStreamResponse, want: breaker.Unusable, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d := natsguard.Stream("BGTNOSUCHSTREAM")
				return d, publishOne(ctx, e, d, "bgtnosuchstream.a", []byte("x"))
			}},
		{name: "subject of no stream", is: natsguard.ErrSubjectNotInStream, want: breaker.Rejected, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, _ := newStream(t, e.js, "nosubj", jetstream.StreamConfig{})
				return d, publishOne(ctx, e, d, "bgtunbound.subject", []byte("x"))
			}},
		{name: "subject of another stream (10060)", is: &jetstream.APIError{ErrorCode: 10060}, want: breaker.Rejected, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, _ := newStream(t, e.js, "mine", jetstream.StreamConfig{})
				_, theirs := newStream(t, e.js, "theirs", jetstream.StreamConfig{})
				return d, publishOne(ctx, e, d, theirs("a"), []byte("x"))
			}},
		{name: "stream full: MaxMsgs, DiscardNew (10077)", is: &jetstream.APIError{ErrorCode: 10077}, want: breaker.Unusable, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "fullmsgs", jetstream.StreamConfig{MaxMsgs: 1, Discard: jetstream.DiscardNew})
				fill(t, e.js, subj("a"), 1, 1)
				return d, publishOne(ctx, e, d, subj("b"), []byte("x"))
			}},
		{name: "stream full: MaxBytes, DiscardNew (10077)", is: &jetstream.APIError{ErrorCode: 10077}, want: breaker.Unusable, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "fullbytes", jetstream.StreamConfig{MaxBytes: 300, Discard: jetstream.DiscardNew})
				fill(t, e.js, subj("a"), 100, 2)
				return d, publishOne(ctx, e, d, subj("b"), make([]byte, 100))
			}},
		{name: "subject full: MaxMsgsPerSubject, DiscardNewPerSubject (10077)", is: &jetstream.APIError{ErrorCode: 10077}, want: breaker.Rejected, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "fullsubj", jetstream.StreamConfig{MaxMsgsPerSubject: 1,
					Discard: jetstream.DiscardNew, DiscardNewPerSubject: true})
				fill(t, e.js, subj("a"), 1, 1)
				err := publishOne(ctx, e, d, subj("a"), []byte("x"))
				if _, other := e.js.Publish(ctx, subj("b"), []byte("x")); other != nil {
					t.Errorf("another subject of the stream: %v", other)
				}
				return d, err
			}},
		{name: "over the stream's MaxMsgSize (10054)", is: &jetstream.APIError{ErrorCode: 10054}, want: breaker.Rejected, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "big", jetstream.StreamConfig{MaxMsgSize: 100})
				return d, publishOne(ctx, e, d, subj("a"), make([]byte, 200))
			}},
		{name: "over the server's max payload", is: nats.ErrMaxPayload, want: breaker.Rejected, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "huge", jetstream.StreamConfig{})
				return d, publishOne(ctx, e, d, subj("a"), make([]byte, e.nc.MaxPayload()+1))
			}},
		{name: "wrong expected last sequence (10071)", is: &jetstream.APIError{ErrorCode: 10071}, want: breaker.Rejected, counted: countedNeutral,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "lastseq", jetstream.StreamConfig{})
				return d, publishOne(ctx, e, d, subj("a"), []byte("x"),
					transport.Header{Key: jetstream.ExpectedLastSeqHeader, Value: []byte("42")})
			}},
		{name: "message without a subject", is: natsguard.ErrInvalidMessage, want: breaker.Rejected, counted: countedNone,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, _ := newStream(t, e.js, "nokey", jetstream.StreamConfig{})
				return d, publishOne(ctx, e, d, "", []byte("x"))
			}},
		{name: "a name no stream can have", is: natsguard.ErrInvalidStream, want: breaker.Unusable, counted: countedNone,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d := natsguard.Stream("orders.eu")
				return d, publishOne(ctx, e, d, "orders.eu.a", []byte("x"))
			}},
		{name: "a connection its owner closed", is: nats.ErrConnectionClosed, want: breaker.Failure, counted: countedFailed,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "connclosed", jetstream.StreamConfig{})
				other, _ := connect(t, url, nil)
				js, err := jetstream.New(other)
				if err != nil {
					t.Fatal(err)
				}
				p, err := natsguard.NewPublisher(js, e.reg, natsguard.WithConnectionName("closed-by-owner"))
				if err != nil {
					t.Fatal(err)
				}
				other.Close()
				return d, p.Publish(ctx, d, msgs(subj("a"), 1)...)
			}},
		{name: "the publisher's own Close", is: natsguard.ErrClosed, want: breaker.Neutral, counted: countedNone,
			do: func(t *testing.T, e *env) (transport.Destination, error) {
				d, subj := newStream(t, e.js, "closed", jetstream.StreamConfig{})
				p, err := natsguard.NewPublisher(e.js, e.reg)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Close(ctx); err != nil {
					t.Fatal(err)
				}
				return d, p.Publish(ctx, d, msgs(subj("a"), 1)...)
			}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t, url, counting, nil)
			d, err := r.do(t, e)
			checkRow(t, e, r, err, d)
		})
	}
}

// fill publishes n messages of size bytes to subject with the raw client.
func fill(t *testing.T, js jetstream.JetStream, subject string, size, n int) {
	t.Helper()
	for range n {
		if _, err := js.Publish(context.Background(), subject, make([]byte, size)); err != nil {
			t.Fatalf("fill %s: %v", subject, err)
		}
	}
}

// stalledEnv is an env on a private server reached through a proxy, with one
// stream; proxy.Hold makes the server look hung (what it sends is held back).
type stalledEnv struct {
	*env
	proxy *harness.Proxy
	d     transport.Destination
	subj  func(string) string
}

func newStalledEnv(t *testing.T, jsOpts []jetstream.JetStreamOpt, opts ...natsguard.Option) *stalledEnv {
	t.Helper()
	server := privateServer(t)
	s := &stalledEnv{proxy: harness.NewProxy(t, server.Addr())}
	s.env = newEnv(t, "nats://"+s.proxy.Addr(), counting, jsOpts)
	if len(opts) > 0 {
		p, err := natsguard.NewPublisher(s.js, s.reg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close(context.Background()) })
		s.p = p
	}
	s.d, s.subj = newStream(t, s.js, "stall", jetstream.StreamConfig{})
	t.Cleanup(s.proxy.Resume) // before the stream's deletion
	return s
}

// asyncResult publishes one message asynchronously and returns PublishAsync's error
// or, once it sent the message and before has run, the promise's.
func asyncResult(ctx context.Context, p *natsguard.Publisher, d transport.Destination, subject string, before func()) error {
	done := make(chan error, 1)
	err := p.PublishAsync(ctx, d, transport.Message{Key: []byte(subject), Value: []byte("x")}, func(_ *jetstream.PubAck, err error) { done <- err })
	if err != nil {
		return err
	}
	if before != nil {
		before()
	}
	return <-done
}

// faultRow is a row produced on a private server whose answers the proxy holds.
type faultRow struct {
	classRow
	do     func(t *testing.T, s *stalledEnv) error // the publish, to s.d
	jsOpts []jetstream.JetStreamOpt
	opts   []natsguard.Option
}

// The rows of a server that stops answering, of the publisher's own limits and of
// the connection's end, on a private server.
func TestClassificationOfFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-servers of its own; skipped under -short")
	}
	short := []jetstream.JetStreamOpt{jetstream.WithDefaultTimeout(300 * time.Millisecond)}
	bg := context.Background()
	rows := []faultRow{
		{classRow: classRow{name: "stalled: the caller's deadline, with its budget", is: context.DeadlineExceeded,
			want: breaker.Neutral, counted: countedFailed}, // the registry's deadline rule, not Classify, makes it a Failure
			do: func(t *testing.T, s *stalledEnv) error {
				ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
				defer cancel()
				return publishOne(ctx, s.env, s.d, s.subj("a"), []byte("x"))
			}},
		{classRow: classRow{name: "stalled: the caller's deadline, shorter than its budget", is: context.DeadlineExceeded,
			want: breaker.Neutral, counted: countedNeutral},
			do: func(t *testing.T, s *stalledEnv) error {
				ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
				defer cancel()
				return publishOne(ctx, s.env, s.d, s.subj("a"), []byte("x"))
			}},
		{classRow: classRow{name: "stalled: the caller cancels", is: context.Canceled, want: breaker.Neutral, counted: countedNeutral},
			do: func(t *testing.T, s *stalledEnv) error {
				ctx, cancel := context.WithCancel(bg)
				defer time.AfterFunc(50*time.Millisecond, cancel).Stop()
				return publishOne(ctx, s.env, s.d, s.subj("a"), []byte("x"))
			}},
		{classRow: classRow{name: "stalled: the JetStream timeout (no caller deadline)", is: natsguard.ErrAckTimeout,
			want: breaker.Failure, counted: countedFailed},
			do: func(t *testing.T, s *stalledEnv) error {
				return publishOne(bg, s.env, s.d, s.subj("a"), []byte("x"))
			}, jsOpts: short},
		{classRow: classRow{name: "async, stalled: the JetStream timeout", is: natsguard.ErrAckTimeout,
			want: breaker.Failure, counted: countedFailed},
			do: func(t *testing.T, s *stalledEnv) error {
				return asyncResult(bg, s.p, s.d, s.subj("a"), nil)
			}, jsOpts: short},
		{classRow: classRow{name: "async: acks pending when the connection drops", is: nats.ErrDisconnected,
			want: breaker.Failure, counted: countedFailed},
			do: func(t *testing.T, s *stalledEnv) error {
				s.proxy.BlackHole() // nothing goes through: no ack can be on its way when the connection drops
				return asyncResult(bg, s.p, s.d, s.subj("a"), s.proxy.Close)
			}},
		{classRow: classRow{name: "async: acks pending when the owner closes the connection", is: nats.ErrConnectionClosed,
			want: breaker.Failure, counted: countedFailed},
			do: func(t *testing.T, s *stalledEnv) error {
				return asyncResult(bg, s.p, s.d, s.subj("a"), s.nc.Close)
			}},
		{classRow: classRow{name: "async: acks pending when Close gives up", is: natsguard.ErrClosed,
			want: breaker.Neutral, counted: countedNeutral},
			do: func(t *testing.T, s *stalledEnv) error {
				return asyncResult(bg, s.p, s.d, s.subj("a"), func() {
					ctx, cancel := context.WithCancel(bg)
					cancel()
					if err := s.p.Close(ctx); !errors.Is(err, natsguard.ErrClosed) || !errors.Is(err, context.Canceled) {
						t.Errorf("Close: %v", err)
					}
				})
			}},
		{classRow: classRow{name: "async: the publisher's bound of pending acks", is: natsguard.ErrTooManyPending,
			want: breaker.Neutral, counted: countedNone},
			do: func(t *testing.T, s *stalledEnv) error {
				s.proxy.Resume()
				other, subj := newStream(t, s.js, "first", jetstream.StreamConfig{})
				s.proxy.Hold()
				first := make(chan error, 1)
				if err := s.p.PublishAsync(bg, other, transport.Message{Key: []byte(subj("a"))},
					func(_ *jetstream.PubAck, err error) { first <- err }); err != nil {
					t.Fatal(err)
				}
				err := asyncResult(bg, s.p, s.d, s.subj("a"), nil)
				if !errors.Is(err, breaker.ErrSaturated) {
					t.Errorf("%v does not match breaker.ErrSaturated", err)
				}
				s.proxy.Resume()
				if err := <-first; err != nil {
					t.Errorf("the first message: %v", err)
				}
				return err
			}, opts: []natsguard.Option{natsguard.WithMaxPending(1)}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			s := newStalledEnv(t, r.jsOpts, r.opts...)
			s.proxy.Hold()
			checkRow(t, s.env, r.classRow, r.do(t, s), s.d)
		})
	}
}
