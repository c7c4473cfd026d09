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
// behind a NATS fault layer (harness.NATSFault) that fails a share of the publishes
// to the stream, in a brownout, with the 503 of a stream without a leader; the
// column publishes through natsguard's Publisher, guarded by its registry.
//
//	GOODPUT=short GOODPUT_BROKERS=jetstream go test -v -run TestIncidents -timeout 60m .

// jetStreamReconnectWait is the client's wait between reconnection attempts, the
// same for every column: short enough that the return of the server is seen within
// the first second, long enough that its attempts on a down server stay at about 2/s
// (nats.go's default is 2 s).
const jetStreamReconnectWait = 500 * time.Millisecond

// openIncidentJetStream is natsguard's Publisher on a connection, through a fault
// layer and a proxy, to a private nats-server with one stream in memory; every
// message is published to one subject of it (the callers' keys are not subjects).
// What the broker received is counted in publishes through the fault layer.
func openIncidentJetStream(t *testing.T, reg *registry.Registry, _ incident) incidentTarget {
	server := harness.NewNATSServer(t)
	const stream, subject = "INCIDENT", "incident.calls"
	proxy := harness.NewProxy(t, server.Addr())
	fault := harness.NewNATSFault(t, proxy.Addr(), subject)
	nc, err := nats.Connect("nats://"+fault.Addr, nats.MaxReconnects(-1), nats.ReconnectWait(jetStreamReconnectWait))
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
		set: proxyConditions(proxy, fault.SetFailShare),
		count: func() brokerCount {
			_, refused := proxy.Connections()
			return brokerCount{fault.Seen.Load(), fault.Failed.Load(), refused}
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
