package transport_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/transport"
)

func TestParseDestination(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   transport.Destination
		reason string
	}{
		{in: "kafka:orders", want: transport.Destination{Broker: "kafka", Name: "orders"}},
		{in: "amqp:amq.default", want: transport.Destination{Broker: "amqp", Name: "amq.default"}},
		{in: "sqs:a:b", want: transport.Destination{Broker: "sqs", Name: "a:b"}},
		{in: "kafka", reason: `want "broker:name"`},
		{in: ":orders", reason: "broker is empty"},
		{in: "kafka:", reason: "name is empty"},
		{in: "Kafka:orders", reason: "broker must start with a lowercase letter"},
		{in: "1kafka:orders", reason: "broker must start with a lowercase letter"},
		{in: "kaf ka:orders", reason: "broker must start with a lowercase letter"},
		{in: strings.Repeat("k", 33) + ":orders", reason: "broker is longer than 32 bytes"},
		{in: "kafka:" + strings.Repeat("n", 256), reason: "name is 256 bytes, more than 255"},
		{in: "kafka:ord\ners", reason: "name contains a control character"},
		{in: "kafka:ord\x7fers", reason: "name contains a control character"},
		{in: "kafka:\xff", reason: "name is not valid UTF-8"},
	} {
		d, err := transport.ParseDestination(tc.in)
		if tc.reason == "" {
			if err != nil || d != tc.want {
				t.Errorf("ParseDestination(%q) = %v, %v; want %v", tc.in, d, err, tc.want)
			}
			if d.String() != tc.in {
				t.Errorf("String() = %q, want %q", d.String(), tc.in)
			}
			continue
		}
		var de *transport.DestinationError
		if !errors.As(err, &de) || !errors.Is(err, transport.ErrInvalidDestination) || !strings.HasPrefix(de.Reason, tc.reason) {
			t.Errorf("ParseDestination(%q): %v, want reason %q", tc.in, err, tc.reason)
		}
		if err != nil && !strings.Contains(err.Error(), "transport: invalid destination") {
			t.Errorf("message %q", err)
		}
	}
}

func TestBatchErrorUnwrapsEachMessage(t *testing.T) {
	tooBig := errors.New("too big")
	err := error(&transport.BatchError{
		Destination: transport.Destination{Broker: "sqs", Name: "q"},
		Failed:      []transport.MessageError{{Index: 1, Err: tooBig}, {Index: 4, Err: errors.New("throttled")}},
	})
	if !errors.Is(err, tooBig) {
		t.Fatal("errors.Is does not see a message's error")
	}
	if got := err.Error(); got != "transport: 2 message(s) to sqs:q not published; [1] too big; [4] throttled" {
		t.Fatalf("message %q", got)
	}
}

func FuzzParseDestination(f *testing.F) {
	for _, s := range []string{"kafka:orders", "sqs:a:b", ":", "x:\x00", "amqp:amq.default"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := transport.ParseDestination(s)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidDestination) {
				t.Fatalf("error %v does not match ErrInvalidDestination", err)
			}
			return
		}
		if d.String() != s {
			t.Fatalf("round trip %q -> %q", s, d.String())
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("parsed destination does not validate: %v", err)
		}
		again, err := transport.ParseDestination(d.String())
		if err != nil || again != d {
			t.Fatalf("reparse of %q: %v, %v", d, again, err)
		}
	})
}
