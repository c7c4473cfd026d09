package natsguard_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/natsguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// offline returns a JetStream context on a connection that has no server (it keeps
// trying to connect), for what a Publisher decides before it sends anything.
func offline(t *testing.T, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://127.0.0.1:1", append([]nats.Option{nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(time.Hour)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func newRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Policy{Circuit: counting}, registry.WithCallCounts())
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestNewPublisherRefusesWhatItCannotUse(t *testing.T) {
	js, reg := offline(t), newRegistry(t)
	for _, tc := range []struct {
		name string
		js   jetstream.JetStream
		reg  *registry.Registry
		opts []natsguard.Option
	}{
		{"nil JetStream", nil, reg, nil},
		{"nil registry", js, nil, nil},
		{"nil classifier", js, reg, []natsguard.Option{natsguard.WithClassifier(nil)}},
		{"no pending bound", js, reg, []natsguard.Option{natsguard.WithMaxPending(0)}},
		{"a connection name no circuit can have", js, reg, []natsguard.Option{natsguard.WithConnectionName("")}},
	} {
		if p, err := natsguard.NewPublisher(tc.js, tc.reg, tc.opts...); err == nil || p != nil {
			t.Errorf("%s: %v, %v", tc.name, p, err)
		}
	}
}

// The connection circuit is named after the connection's nats.Name, else its first
// server, unless WithConnectionName names it.
func TestConnectionCircuitName(t *testing.T) {
	reg := newRegistry(t)
	for _, tc := range []struct {
		js   jetstream.JetStream
		opts []natsguard.Option
		want string
	}{
		{offline(t), nil, "nats-connection:127.0.0.1:1"},
		{offline(t, nats.Name("billing")), nil, "nats-connection:billing"},
		{offline(t, nats.Name("billing")), []natsguard.Option{natsguard.WithConnectionName("eu-cluster")}, "nats-connection:eu-cluster"},
	} {
		p, err := natsguard.NewPublisher(tc.js, reg, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Connection().String(); got != tc.want {
			t.Errorf("connection circuit %q, want %q", got, tc.want)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// What a Publisher refuses before any permit is taken, with the error that says so.
func TestRefusedBeforeAnyPermit(t *testing.T) {
	reg := newRegistry(t)
	p, err := natsguard.NewPublisher(offline(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := transport.Message{Key: []byte("orders.eu"), Value: []byte("x")}
	for _, tc := range []struct {
		name string
		d    transport.Destination
		msgs []transport.Message
		is   error
	}{
		{"another broker", transport.Destination{Broker: "kafka", Name: "ORDERS"}, []transport.Message{ok}, natsguard.ErrNotNATS},
		{"a name no stream can have", natsguard.Stream("orders.eu"), []transport.Message{ok}, natsguard.ErrInvalidStream},
		{"an invalid destination", natsguard.Stream(""), []transport.Message{ok}, transport.ErrInvalidDestination},
		{"no messages", natsguard.Stream("ORDERS"), nil, registry.ErrNoMessages},
		{"no subject", natsguard.Stream("ORDERS"), []transport.Message{ok, {Value: []byte("x")}}, natsguard.ErrInvalidMessage},
		{"a wildcard subject", natsguard.Stream("ORDERS"), []transport.Message{{Key: []byte("orders.*")}}, natsguard.ErrInvalidMessage},
	} {
		err := p.Publish(ctx, tc.d, tc.msgs...)
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.is)
		}
		if len(tc.msgs) == 1 {
			if aerr := p.PublishAsync(ctx, tc.d, tc.msgs[0], nil); !errors.Is(aerr, tc.is) {
				t.Errorf("%s, async: %v, want %v", tc.name, aerr, tc.is)
			}
		}
	}
	var im *natsguard.InvalidMessageError
	if err := p.Publish(ctx, natsguard.Stream("ORDERS"), ok, transport.Message{}); !errors.As(err, &im) || im.Index != 1 {
		t.Errorf("the message without a subject: %v, want index 1", err)
	}
	if n := reg.Len(); n != 0 {
		t.Errorf("%d circuits made by refused publishes", n)
	}
}

// registry.Guard hands a Publisher of its own registry back as it is, and its
// classifier is Classify unless replaced.
func TestAlreadyGuarded(t *testing.T) {
	reg := newRegistry(t)
	p, err := natsguard.NewPublisher(offline(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	if g := reg.Guard(p, nil); g != transport.Publisher(p) {
		t.Errorf("Guard wrapped the publisher: %T", g)
	}
	if p.Classifier()(natsguard.ErrAckTimeout) != breaker.Failure {
		t.Error("the default classifier is not Classify")
	}
	mine := func(error) breaker.Outcome { return breaker.Neutral }
	q, err := natsguard.NewPublisher(offline(t), reg, natsguard.WithClassifier(mine))
	if err != nil {
		t.Fatal(err)
	}
	if q.Classifier()(natsguard.ErrAckTimeout) != breaker.Neutral {
		t.Error("WithClassifier did not replace Classify")
	}
}

// A message's headers reach the stream as NATS headers, the values of a repeated key
// in their order, with Nats-Expected-Stream and the context's id as Nats-Msg-Id
// unless a header sets one, whether it is published synchronously or not.
func TestHeadersReachTheStream(t *testing.T) {
	e := newEnv(t, machine(t), counting, nil)
	d, subj := newStream(t, e.js, "headers", jetstream.StreamConfig{})
	cases := []struct {
		name    string
		headers []transport.Header
		id      string
		want    nats.Header
	}{
		{name: "none", want: nats.Header{}},
		{name: "repeated key", headers: []transport.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("two")},
			{Key: "a", Value: []byte("three")}, {Key: "a", Value: nil}},
			id: "row-7", want: nats.Header{"a": {"1", "three", ""}, "b": {"two"}, jetstream.MsgIDHeader: {"row-7"}}},
		{name: "a header's id wins", headers: []transport.Header{{Key: jetstream.MsgIDHeader, Value: []byte("mine")}},
			id: "row-8", want: nats.Header{jetstream.MsgIDHeader: {"mine"}}},
	}
	ctx := context.Background()
	for _, async := range []bool{false, true} {
		for i, c := range cases {
			t.Run(fmt.Sprintf("%s/async=%v", c.name, async), func(t *testing.T) {
				id := c.id
				if id != "" && async {
					id += "-async" // not a duplicate of the synchronous one
					c.want = cloneHeader(c.want)
					if c.want.Get(jetstream.MsgIDHeader) == c.id {
						c.want.Set(jetstream.MsgIDHeader, id)
					}
				}
				call := ctx
				if id != "" {
					call = transport.WithMessageIDs(ctx, []string{id})
				}
				msg := transport.Message{Key: []byte(subj(fmt.Sprintf("m%d-%v", i, async))), Value: []byte("v"), Headers: c.headers}
				var seq uint64
				if async {
					acked := make(chan error, 1)
					if err := e.p.PublishAsync(call, d, msg, func(ack *jetstream.PubAck, err error) {
						if err == nil {
							seq = ack.Sequence
						}
						acked <- err
					}); err != nil {
						t.Fatal(err)
					}
					if err := <-acked; err != nil {
						t.Fatal(err)
					}
				} else {
					if err := e.p.Publish(call, d, msg); err != nil {
						t.Fatal(err)
					}
				}
				s, err := e.js.Stream(ctx, d.Name)
				if err != nil {
					t.Fatal(err)
				}
				var got *jetstream.RawStreamMsg
				if async {
					got, err = s.GetMsg(ctx, seq)
				} else {
					got, err = s.GetLastMsgForSubject(ctx, string(msg.Key))
				}
				if err != nil {
					t.Fatal(err)
				}
				want := cloneHeader(c.want)
				want[jetstream.ExpectedStreamHeader] = []string{d.Name}
				if !reflect.DeepEqual(got.Header, want) {
					t.Errorf("stored headers %v, want %v", got.Header, want)
				}
			})
		}
	}
}

func cloneHeader(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, vs := range h {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
