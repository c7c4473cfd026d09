package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// fakeBroker listens on loopback and does what serve says with each connection,
// instead of speaking AMQP; it stops in cleanup.
func fakeBroker(t *testing.T, serve func(*net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			serve(c.(*net.TCPConn))
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// dialErr dials addr with the SDK and returns its error.
func dialErr(t *testing.T, addr string, timeout time.Duration) error {
	t.Helper()
	conn, err := amqp091.DialConfig("amqp://guest:guest@"+addr+"/", amqp091.Config{Dial: amqp091.DefaultDial(timeout)})
	if err == nil {
		conn.Close()
		t.Fatalf("dial %s succeeded", addr)
	}
	return err
}

// TestClassify covers the rows that need no broker; integration/amqp produces the
// broker's own (404, nack, 320, 403, 406, stop_app, confirm timeout) for real.
func TestClassify(t *testing.T) {
	refused := dialErr(t, closedAddr(t), time.Second)
	if !errors.Is(refused, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a closed port: %v", refused)
	}
	eof := dialErr(t, fakeBroker(t, func(c *net.TCPConn) { c.Close() }), time.Second)
	reset := dialErr(t, fakeBroker(t, func(c *net.TCPConn) {
		c.SetLinger(0) // close with RST
		c.Read(make([]byte, 8))
		c.Close()
	}), time.Second)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	timeout := dialErr(t, fakeBroker(t, func(c *net.TCPConn) {
		go func() { <-hang; c.Close() }()
	}), 50*time.Millisecond)
	openErr := &amqp.DialError{Addr: "h:5672", Err: &breaker.OpenError{Identity: "amqp-connection:h:5672", NotBefore: time.Now()}}
	saturated := &amqp.DialError{Addr: "h:5672", Err: breaker.ErrSaturated}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now())
	defer cancel2()

	for _, tc := range []struct {
		name string
		err  error
		want breaker.Outcome
	}{
		{"nil", nil, breaker.Success},
		{"nack", &amqp.ConfirmError{Exchange: "x"}, breaker.Failure},
		{"confirm timeout", &amqp.ConfirmError{Exchange: "x", Timeout: time.Second}, breaker.Failure},
		{"ErrClosed", amqp091.ErrClosed, breaker.Failure},
		{"ErrClosed wrapped", fmt.Errorf("amqp: open channel: %w", amqp091.ErrClosed), breaker.Failure},
		{"dial refused", refused, breaker.Failure},
		{"dial refused in DialError", &amqp.DialError{Addr: "h", Err: refused}, breaker.Failure},
		{"connection closed in handshake (501 EOF)", eof, breaker.Failure},
		{"connection reset in handshake (501)", reset, breaker.Failure},
		{"handshake timeout (501)", timeout, breaker.Failure},
		{"connection circuit open", openErr, breaker.Failure},
		{"connection circuit saturated", saturated, breaker.Failure},
		{"bad credentials (403)", amqp091.ErrCredentials, breaker.Unusable},
		{"no vhost access (403)", amqp091.ErrVhost, breaker.Unusable},
		{"SASL (403)", amqp091.ErrSASL, breaker.Unusable},
		{"missing exchange", &amqp.ChannelError{Exchange: "x", Err: &amqp091.Error{Code: amqp091.NotFound}}, breaker.Unusable},
		{"forced close of the channel", &amqp.ChannelError{Exchange: "x", Err: &amqp091.Error{Code: amqp091.ConnectionForced}}, breaker.Failure},
		{"returned", &amqp.ReturnedError{Exchange: "x", Code: amqp091.NoRoute}, breaker.Rejected},
		{"channel ids exhausted (client side)", amqp091.ErrChannelMax, breaker.Neutral},
		{"channel ids exhausted wrapped", fmt.Errorf("amqp: open channel: %w", amqp091.ErrChannelMax), breaker.Neutral},
		{"login refused in DialError", &amqp.DialError{Addr: "h", Err: amqp091.ErrCredentials}, breaker.Unusable},
		{"circuit open after refused logins", &amqp.DialError{Addr: "h", Err: breaker.ErrOpen, Last: amqp091.ErrVhost}, breaker.Unusable},
		{"message over max size (406)", &amqp.ChannelError{Exchange: "x", Err: &amqp091.Error{Code: amqp091.PreconditionFailed}}, breaker.Rejected},
		{"caller cancelled", cancelled.Err(), breaker.Neutral},
		{"caller deadline", expired.Err(), breaker.Neutral},
		{"manager closed", amqp.ErrManagerClosed, breaker.Neutral},
		{"wrong broker", amqp.ErrWrongBroker, breaker.Neutral},
		{"application error", errors.New("bug"), breaker.Neutral},
	} {
		if got := amqp.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestErrorsMatchTheirSentinels(t *testing.T) {
	notFound := &amqp091.Error{Code: amqp091.NotFound, Reason: "NOT_FOUND - no exchange 'orders' in vhost '/'"}
	for _, tc := range []struct {
		err      error
		sentinel error
		text     string
	}{
		{&amqp.ConfirmError{Exchange: "orders"}, amqp.ErrNacked, `amqp: exchange "orders": broker nacked the message`},
		{&amqp.ConfirmError{Exchange: ""}, amqp.ErrNacked, `amqp: exchange "" (the default exchange): broker nacked the message`},
		{&amqp.ConfirmError{Exchange: "orders", Timeout: 5 * time.Second}, amqp.ErrConfirmTimeout, `amqp: exchange "orders": no publisher confirm within 5s`},
		{&amqp.ChannelError{Exchange: "orders", Err: notFound}, amqp.ErrExchangeNotFound, `amqp: exchange "orders" does not exist: Exception (404) Reason: "NOT_FOUND - no exchange 'orders' in vhost '/'"`},
		{&amqp.ReturnedError{Exchange: "orders", RoutingKey: "k", Code: 312, Text: "NO_ROUTE"}, amqp.ErrUnroutable, `amqp: exchange "orders" returned the message with routing key "k": 312 NO_ROUTE`},
	} {
		if !errors.Is(tc.err, tc.sentinel) || tc.err.Error() != tc.text {
			t.Errorf("%v: Is(%v) = %v; text %q, want %q", tc.err, tc.sentinel, errors.Is(tc.err, tc.sentinel), tc.err.Error(), tc.text)
		}
	}
	if errors.Is(&amqp.ConfirmError{}, amqp.ErrConfirmTimeout) || errors.Is(&amqp.ChannelError{Err: amqp091.ErrClosed}, amqp.ErrExchangeNotFound) {
		t.Error("a sentinel matches an error of the other kind")
	}
	var ae *amqp091.Error
	if !errors.As(&amqp.ChannelError{Exchange: "orders", Err: notFound}, &ae) || ae != notFound {
		t.Error("ChannelError does not unwrap to the broker's error")
	}
}
