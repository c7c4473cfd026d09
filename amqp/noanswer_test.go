package amqp

import (
	"errors"
	"net"
	"os"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// amqp091 reports a connection it closed on a read timeout (the heartbeat's) as a 501
// whose reason is the net error's text: such a channel or dial error says the broker
// did not answer in time, not that it answered with an error.
func TestReadTimeoutsMatchErrNoAnswer(t *testing.T) {
	timeout := &amqp091.Error{Code: amqp091.FrameError, Reason: "read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout"}
	frame := &amqp091.Error{Code: amqp091.FrameError, Reason: "invalid frame"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&ChannelError{Exchange: "x", Err: timeout}, true},
		{&DialError{Addr: "h:1", Err: timeout}, true},
		{&ChannelError{Exchange: "x", Err: frame}, false},
		{&DialError{Addr: "h:1", Err: frame}, false},
		{&ChannelError{Exchange: "x", Err: &amqp091.Error{Code: amqp091.NotFound, Reason: "i/o timeout"}}, false},
		// The connection circuit refused the dial after dials that timed out.
		{&DialError{Addr: "h:1", Err: breaker.ErrOpen, Last: timeout}, true},
		{&DialError{Addr: "h:1", Err: breaker.ErrOpen, Last: &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}}, true},
		{&DialError{Addr: "h:1", Err: breaker.ErrOpen, Last: frame}, false},
		{&DialError{Addr: "h:1", Err: breaker.ErrOpen}, false},
	} {
		if got := errors.Is(c.err, transport.ErrNoAnswer); got != c.want {
			t.Errorf("errors.Is(%v, ErrNoAnswer) = %v, want %v", c.err, got, c.want)
		}
	}
}
