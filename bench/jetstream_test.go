package bench

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/natsguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The JetStream column of the partial-failure scenarios (incidents_test.go): each
// column's child process starts a nats-server of its own, with JetStream, behind a
// proxy (harness.Proxy) that makes it slow (SetLatency) or down (connections reset),
// and publishes through natsguard's Publisher, guarded by the column's registry.
//
//	GOODPUT=short GOODPUT_BROKERS=jetstream go test -v -run TestIncidents -timeout 60m .

// jetStreamCannotDo are the scenarios the JetStream target cannot make, with why.
var jetStreamCannotDo = map[string]string{
	"brownout": "nats-server has no fault that fails a share of publishes with an error of its own, and failing a share " +
		"would take a proxy that parses the NATS protocol and answers on the message's reply subject",
}

// jetStreamReconnectWait is the client's wait between reconnection attempts, the
// same for every column: short enough that the return of the server is seen within
// the first second, long enough that its attempts on a down server stay at about 2/s
// (nats.go's default is 2 s).
const jetStreamReconnectWait = 500 * time.Millisecond

// openIncidentJetStream is natsguard's Publisher on a connection, through a proxy, to
// a private nats-server with one stream in memory; every message is published to
// one subject of it (the callers' keys are not subjects). What the broker received is
// counted in KB sent through the proxy.
func openIncidentJetStream(t *testing.T, reg *registry.Registry) incidentTarget {
	server := harness.NewNATSServer(t)
	proxy := harness.NewProxy(t, server.Addr())
	nc, err := nats.Connect("nats://"+proxy.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(jetStreamReconnectWait))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const stream, subject = "INCIDENT", "incident.calls"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject},
		Storage: jetstream.MemoryStorage, MaxMsgs: 100_000}); err != nil {
		t.Fatal(err)
	}
	pub, err := natsguard.NewPublisher(js, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = pub.Close(ctx)
	})
	return incidentTarget{pub: toSubject{pub, []byte(subject)}, d: natsguard.Stream(stream),
		set: proxyConditions(proxy, nil),
		count: func() brokerCount {
			_, refused := proxy.Connections()
			return brokerCount{Requests: proxy.Sent() >> 10, Refused: refused}
		}}
}

// toSubject publishes every message to one subject, its Key.
type toSubject struct {
	p       transport.Publisher
	subject []byte
}

func (s toSubject) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	out := make([]transport.Message, len(msgs))
	for i, m := range msgs {
		m.Key = s.subject
		out[i] = m
	}
	return s.p.Publish(ctx, d, out...)
}
