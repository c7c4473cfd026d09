package harness

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultAMQPURL is the URL used when AMQP_URL is unset.
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

const rabbitHint = "start it with `rabbitmq-server -detached` or set AMQP_URL"

// Bounds for RabbitMQ commands and for waiting until the broker serves AMQP again.
const (
	rabbitCtlTimeout = 60 * time.Second
	rabbitUpTimeout  = 60 * time.Second
)

// startRabbitOnce makes the harness try to start the local broker at most once per test
// binary.
var startRabbitOnce sync.Once

// RabbitMQ returns the URL from AMQP_URL (or DefaultAMQPURL) once its host accepts TCP
// connections. When AMQP_URL is unset and the broker is down, it tries once to start
// it (start_app when the Erlang node runs, else `rabbitmq-server -detached`) and waits
// up to 60 seconds for AMQP.
func RabbitMQ() (amqpURL string, err error) {
	amqpURL, isDefault := envOr("AMQP_URL", DefaultAMQPURL)
	hp, err := hostPort(amqpURL)
	if err == nil {
		err = reach(hp, isDefault, &startRabbitOnce, startLocalRabbit, func() error { return waitAMQP(amqpURL, rabbitUpTimeout) }, nil)
	}
	if err != nil {
		return "", &UnavailableError{Service: ServiceRabbitMQ, Addr: hp, Hint: rabbitHint, Err: err}
	}
	return amqpURL, nil
}

// startLocalRabbit starts the machine's broker. Failures are ignored: the caller then
// waits for AMQP and reports whether the broker came up.
func startLocalRabbit() {
	ctx, cancel := context.WithTimeout(context.Background(), rabbitCtlTimeout)
	defer cancel()
	if exec.CommandContext(ctx, "rabbitmqctl", "-q", "ping").Run() == nil {
		// The node runs but the application is stopped (left so by a crashed test).
		_ = exec.CommandContext(ctx, "rabbitmqctl", "-q", "start_app").Run()
		return
	}
	_ = exec.CommandContext(ctx, "rabbitmq-server", "-detached").Run()
}

// AMQPURL returns the broker's URL for a test, after Require on RabbitMQ's error.
// Tests on it must leave it serving: a test that stops a broker or raises its memory
// alarm uses a node of its own (NewRabbitNode).
func AMQPURL(t testing.TB) string {
	t.Helper()
	u, err := RabbitMQ()
	Require(t, ServiceRabbitMQ, err)
	return u
}

// RabbitCtl runs rabbitmqctl with args (bounded by a minute) against the machine's
// broker and returns its combined output. It works only against the local broker,
// whatever AMQP_URL says; it is for reading it and for acting on the test's own
// connections, never for stopping or alarming it (see NewRabbitNode).
func RabbitCtl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rabbitCtlTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("harness: rabbitmqctl %v: %w: %s", args, err, oneLine(string(out)))
	}
	return string(out), nil
}

// waitAMQP polls until an AMQP connection to amqpURL opens (the handshake, not only
// TCP) or d has passed.
func waitAMQP(amqpURL string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		conn, err := amqp.DialConfig(amqpURL, amqp.Config{Dial: amqp.DefaultDial(dialTimeout)})
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
