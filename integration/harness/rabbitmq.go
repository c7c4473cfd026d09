package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
		err = dial(hp)
		if err != nil && isDefault {
			startRabbitOnce.Do(startLocalRabbit)
			err = waitAMQP(amqpURL, rabbitUpTimeout)
		}
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

// AMQPURL returns the broker's URL for a test, after Require on RabbitMQ's error. While
// the test runs it holds a shared lock that StopRabbitApp in another test process
// waits for, so an outage test in one package never stops the broker under a test of
// another package.
func AMQPURL(t testing.TB) string {
	t.Helper()
	lockRabbit(t, false)
	u, err := RabbitMQ()
	Require(t, ServiceRabbitMQ, err)
	return u
}

// RabbitCtl runs rabbitmqctl with args (bounded by a minute) and returns its combined
// output. It works only against the local broker, whatever AMQP_URL says.
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

// StopRabbitApp stops the RabbitMQ application (the Erlang node keeps running), so
// clients see refused connections. It first waits for RabbitMQ tests in other test
// processes to finish and keeps them out until the broker is back. The cleanup it
// registers starts the application again and waits until AMQP connections succeed,
// whether or not the test failed. Tests in one package that call it must not run in
// parallel with the package's other RabbitMQ tests.
func StopRabbitApp(t testing.TB) {
	t.Helper()
	// Lock first: RabbitMQ() would restart a broker another process stopped on purpose.
	lockRabbit(t, true)
	_, err := RabbitMQ()
	Require(t, ServiceRabbitMQ, err)
	t.Cleanup(func() {
		if err := startRabbitApp(t); err != nil {
			t.Errorf("%v", err)
		}
	})
	if _, err := RabbitCtl(t, "-q", "stop_app"); err != nil {
		t.Fatal(err)
	}
}

// BlockRabbit raises RabbitMQ's memory alarm, by setting the memory high watermark far
// below what the node uses, and waits until the alarm is on: the broker then blocks
// the connections that publish (connection.blocked). Like StopRabbitApp it first
// takes the exclusive RabbitMQ lock, so RabbitMQ tests of other test processes wait
// until the broker is unblocked, and the same rule holds for tests of its own
// package. The cleanup it registers restores the watermark it found and waits for the
// alarm to clear, whether or not the test failed.
func BlockRabbit(t testing.TB) {
	t.Helper()
	lockRabbit(t, true)
	_, err := RabbitMQ()
	Require(t, ServiceRabbitMQ, err)
	out, err := RabbitCtl(t, "-q", "eval", "vm_memory_monitor:get_vm_memory_high_watermark().")
	if err != nil {
		t.Fatal(err)
	}
	restore, err := watermarkArgs(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := RabbitCtl(t, append([]string{"-q", "set_vm_memory_high_watermark"}, restore...)...); err != nil {
			t.Errorf("harness: restore the memory watermark: %v", err)
			return
		}
		if err := waitAlarm(t, false); err != nil {
			t.Error(err)
		}
	})
	if _, err := RabbitCtl(t, "-q", "set_vm_memory_high_watermark", "0.0000001"); err != nil {
		t.Fatal(err)
	}
	if err := waitAlarm(t, true); err != nil {
		t.Fatal(err)
	}
}

// watermarkArgs turns what vm_memory_monitor reports ("0.4" or
// "{absolute,1073741824}") into the arguments of set_vm_memory_high_watermark.
func watermarkArgs(v string) ([]string, error) {
	if rest, ok := strings.CutPrefix(v, "{absolute,"); ok {
		return []string{"absolute", strings.TrimSuffix(rest, "}")}, nil
	}
	if v == "" || strings.ContainsAny(v, "{}[] ") {
		return nil, fmt.Errorf("harness: unexpected memory high watermark %q", v)
	}
	return []string{v}, nil
}

// waitAlarm polls the node's alarms until one is on (on) or none is, for a minute.
func waitAlarm(t testing.TB, on bool) error {
	deadline := time.Now().Add(rabbitUpTimeout)
	for {
		out, err := RabbitCtl(t, "-q", "eval", "rabbit_alarm:get_alarms().")
		if err == nil && (strings.TrimSpace(out) != "[]") == on {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("harness: RabbitMQ alarm still %v after %v (%s, %v)", !on, rabbitUpTimeout, oneLine(out), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StartRabbitApp starts the RabbitMQ application and waits until it accepts AMQP
// connections; the test fails if it does not within a minute.
func StartRabbitApp(t testing.TB) {
	t.Helper()
	if err := startRabbitApp(t); err != nil {
		t.Fatal(err)
	}
}

func startRabbitApp(t testing.TB) error {
	if _, err := RabbitCtl(t, "-q", "start_app"); err != nil {
		return err
	}
	u, _ := envOr("AMQP_URL", DefaultAMQPURL)
	if err := waitAMQP(u, rabbitUpTimeout); err != nil {
		return fmt.Errorf("harness: RabbitMQ not serving AMQP %v after start_app: %w", rabbitUpTimeout, err)
	}
	return nil
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

// rabbitLock coordinates the test processes of one machine: tests that use the broker
// hold a shared flock on one file, StopRabbitApp an exclusive one. Within a process
// the lock is held once, counted below.
var rabbitLock struct {
	mu      sync.Mutex // guards the fields below and flock calls on f
	f       *os.File   // open while any test of this process holds the lock
	readers int        // tests holding it through AMQPURL
	writers int        // tests holding it through StopRabbitApp
}

// rabbitLockPath is shared by every test process on the machine.
var rabbitLockPath = filepath.Join(os.TempDir(), "brokerguard-rabbitmq.lock")

// lockRabbit takes the process's shared (or exclusive) hold on the broker for the rest
// of the test and releases it in t.Cleanup.
func lockRabbit(t testing.TB, exclusive bool) {
	t.Helper()
	l := &rabbitLock
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		f, err := os.OpenFile(rabbitLockPath, os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatalf("harness: open %s: %v", rabbitLockPath, err)
		}
		l.f = f
	}
	switch {
	case exclusive && l.writers == 0:
		if err := flockWait(l.f, syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
	case !exclusive && l.readers == 0 && l.writers == 0:
		if err := flockWait(l.f, syscall.LOCK_SH); err != nil {
			t.Fatal(err)
		}
	}
	if exclusive {
		l.writers++
	} else {
		l.readers++
	}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if exclusive {
			l.writers--
		} else {
			l.readers--
		}
		var err error
		switch {
		case l.writers > 0:
		case l.readers > 0:
			if exclusive {
				err = flockWait(l.f, syscall.LOCK_SH)
			}
		default:
			err = l.f.Close() // closing drops the flock
			l.f = nil
		}
		if err != nil {
			t.Error(err)
		}
	})
}

// flockWait takes a flock on f, polling so that the wait is bounded by five minutes
// rather than by the test binary's timeout.
func flockWait(f *os.File, how int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return fmt.Errorf("harness: lock %s: %w", f.Name(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
