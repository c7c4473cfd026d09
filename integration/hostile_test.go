package integration_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // sql.Open("mysql", …) below connects to nothing
	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/observe"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/mysql"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// nopPublisher accepts everything; the calls below never reach it.
type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return nil
}

// Hostile use of the public API: nil options, zero, negative and NaN values, nil
// collaborators. Each constructor answers with an error that names what is wrong,
// never with a panic or a value that fails later.
func TestHostileCallsAreRefusedByName(t *testing.T) {
	circuit := func(edit func(*breaker.Policy)) registry.Policy {
		p := registry.DefaultPolicy()
		edit(&p.Circuit)
		return p
	}
	shared := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, Scope: breaker.SharedDependency}
	reg, err := registry.New(registry.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(nil)
	writer := kafka.NewWriter("127.0.0.1:1")
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var nilAPI sqs.API
	var nilCtx context.Context
	publisher := func(name string, p transport.Publisher, err error) func() error {
		return func() error {
			if err != nil {
				return fmt.Errorf("building the %s publisher: %w", name, err)
			}
			return p.Publish(nilCtx, transport.Destination{Broker: name, Name: "t"}, transport.Message{Value: []byte("v")})
		}
	}
	kafkaPub, kafkaErr := kafka.NewPublisher(writer, reg)
	sqsPub, sqsErr := sqs.NewPublisher(struct{ sqs.API }{}, reg) // never called
	manager, err := amqp.NewManager("amqp://guest:guest@127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = manager.Close() })
	amqpPub, amqpErr := amqp.NewPublisher(manager, reg)

	for _, c := range []struct {
		name string
		call func() error
		want string // in the error: the field, argument or option at fault
	}{
		{"registry.New nil option", func() error { _, err := registry.New(registry.DefaultPolicy(), nil); return err }, "option 1"},
		{"registry.New second option nil", func() error {
			_, err := registry.New(registry.DefaultPolicy(), registry.WithMaxDestinations(10), nil)
			return err
		}, "option 2"},
		{"registry.New zero break", func() error {
			_, err := registry.New(circuit(func(p *breaker.Policy) { p.BreakDuration = 0 }))
			return err
		}, "BreakDuration"},
		{"registry.New negative break", func() error {
			_, err := registry.New(circuit(func(p *breaker.Policy) { p.BreakDuration = -time.Second }))
			return err
		}, "BreakDuration"},
		{"registry.New NaN jitter", func() error {
			_, err := registry.New(circuit(func(p *breaker.Policy) { p.Jitter = math.NaN() }))
			return err
		}, "Jitter"},
		{"registry.New NaN failure ratio", func() error {
			_, err := registry.New(circuit(func(p *breaker.Policy) { p.FailureWindow, p.FailureRatio = time.Minute, math.NaN() }))
			return err
		}, "FailureRatio"},
		{"breaker.New NaN slow-call ratio", func() error {
			_, err := breaker.New("x", breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, FailureWindow: time.Minute,
				SlowCallDuration: time.Second, SlowCallRatio: math.NaN()})
			return err
		}, "SlowCallRatio"},
		{"breaker.New negative threshold", func() error {
			_, err := breaker.New("x", breaker.Policy{FailureThreshold: -1, BreakDuration: time.Second})
			return err
		}, "FailureThreshold"},
		{"breaker.New huge break", func() error {
			_, err := breaker.New("x", breaker.Policy{FailureThreshold: 5, BreakDuration: math.MaxInt64, MaxBreakDuration: time.Hour})
			return err
		}, "BreakDuration"},
		{"admission.NewThrottle NaN K", func() error {
			_, err := admission.NewThrottle(admission.ThrottlePolicy{K: math.NaN()}, nil)
			return err
		}, "K"},
		{"admission.NewThrottle negative window", func() error {
			_, err := admission.NewThrottle(admission.ThrottlePolicy{K: 3, Window: -time.Second}, nil)
			return err
		}, "Window"},
		{"sharedstate.New nil driver", func() error {
			_, err := sharedstate.New(sharedstate.Config{Identity: "x", Policy: shared, Scope: breaker.SharedDependency})
			return err
		}, "Driver"},
		{"sharedstate.New empty identity", func() error { _, err := sharedstate.New(sharedstate.Config{}); return err }, "identity"},
		{"redis.New nil client", func() error { _, err := redisstate.New(nil, "x", shared); return err }, "client"},
		{"redis.NewDriver nil client", func() error { _, err := redisstate.NewDriver(nil); return err }, "client"},
		{"dynamo.New nil client", func() error { _, err := dynamo.New(nil, "circuits", "x", shared); return err }, "client"},
		{"outbox.NewProcessor nil store", func() error { _, err := outbox.NewProcessor(nil, nil, nopPublisher{}); return err }, "store"},
		{"outbox.NewProcessor nil publisher", func() error { _, err := outbox.NewProcessor(store, nil, nil); return err }, "publisher"},
		{"outbox.NewProcessor nil option", func() error { _, err := outbox.NewProcessor(store, nil, nopPublisher{}, nil); return err }, "option 1"},
		{"outbox.NewProcessor zero lease", func() error {
			_, err := outbox.NewProcessor(store, nil, nopPublisher{}, outbox.WithLease(0))
			return err
		}, "WithLease"},
		{"outbox.NewProcessor negative jitter", func() error {
			_, err := outbox.NewProcessor(store, nil, nopPublisher{}, outbox.WithDeferralJitter(math.MinInt64))
			return err
		}, "WithDeferralJitter"},
		{"kafka.NewPublisher nil writer", func() error { _, err := kafka.NewPublisher(nil, reg); return err }, "writer"},
		{"kafka.NewPublisher nil registry", func() error { _, err := kafka.NewPublisher(writer, nil); return err }, "registry"},
		{"kafka.NewPublisher nil option", func() error { _, err := kafka.NewPublisher(writer, reg, nil); return err }, "option 1"},
		{"kafka.NewPublisher writer without address", func() error { _, err := kafka.NewPublisher(&kafkago.Writer{}, reg); return err }, "Addr"},
		{"amqp.NewPublisher nil manager", func() error { _, err := amqp.NewPublisher(nil, reg); return err }, "Manager"},
		{"amqp.NewManager bad URL", func() error { _, err := amqp.NewManager("http://x"); return err }, "AMQP scheme"},
		{"sqs.NewPublisher nil client", func() error { _, err := sqs.NewPublisher(nilAPI, reg); return err }, "client"},
		{"sqstest.New nil option", func() error { _, err := sqstest.New(nil); return err }, "option 1"},
		{"mysql.New nil db", func() error { _, err := mysql.New(nil); return err }, "New(nil)"},
		{"mysql.New nil option", func() error { _, err := mysql.New(db, nil); return err }, "option 1"},
		{"telemetry.New nil registry", func() error { _, err := telemetry.New(nil); return err }, "registry"},
		{"admin.New nil registry", func() error { _, err := admin.New(nil); return err }, "registry"},
		{"admin.New nil option", func() error { _, err := admin.New(reg, nil); return err }, "option 1"},
		{"observe.New nil option", func() error { _, err := observe.New(registry.DefaultPolicy(), nil); return err }, "option 1"},
		{"kafka Publish nil context", publisher(kafka.Broker, kafkaPub, kafkaErr), "nil context"},
		{"sqs Publish nil context", publisher(sqs.Broker, sqsPub, sqsErr), "nil context"},
		{"amqp Publish nil context", publisher(amqp.Broker, amqpPub, amqpErr), "nil context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := refusal(c.call)
			switch {
			case err == nil:
				t.Fatalf("accepted; want an error naming %q", c.want)
			case !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q does not name %q", err, c.want)
			}
		})
	}
}

// refusal runs call and returns its error, or a panic as an error that says so.
func refusal(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked (want an error): %v", r)
		}
	}()
	return call()
}
