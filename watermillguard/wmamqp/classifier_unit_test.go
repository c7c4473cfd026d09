package wmamqp_test

import (
	"errors"
	"fmt"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/watermillguard/wmamqp"
)

type conn struct{ connected, closed bool }

func (c conn) IsConnected() bool { return c.connected }
func (c conn) Closed() bool      { return c.closed }

// The publisher's state decides first; then the nack's text; then amqp.Classify. The
// integration tests produce the nack, the lost connection and the closed publisher.
func TestClassifierOrder(t *testing.T) {
	up, down, closed := conn{connected: true}, conn{}, conn{closed: true}
	other := errors.New("cannot marshal message")
	for _, tc := range []struct {
		name string
		c    conn
		err  error
		want breaker.Outcome
	}{
		{"nil", up, nil, breaker.Success},
		{"connected, application error", up, other, breaker.Neutral},
		{"not connected", down, other, breaker.Failure},
		{"closed", closed, other, breaker.Neutral},
		{"nack", up, fmt.Errorf("delivery not confirmed for message [%s]", "u-1"), breaker.Failure},
		{"dead channel", up, fmt.Errorf("cannot publish msg: %w", amqp091.ErrClosed), breaker.Failure},
		{"access refused", up, fmt.Errorf("cannot publish msg: %w", &amqp091.Error{Code: amqp091.AccessRefused}), breaker.Unusable},
	} {
		if got := wmamqp.Classifier(tc.c)(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
