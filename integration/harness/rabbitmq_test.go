package harness

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// openChannel dials the broker and opens a channel, the least a publisher needs.
func openChannel(url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(dialTimeout)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return ch.Close()
}

// assertLocked checks that another open file description (as another test process
// would have) cannot take the broker lock in the given mode.
func assertLocked(t *testing.T, how int) {
	t.Helper()
	f, err := os.Open(rabbitLockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock(%d) by another process: %v; want EWOULDBLOCK", how, err)
	}
}

func TestRabbitMQReachable(t *testing.T) {
	if err := openChannel(AMQPURL(t)); err != nil {
		t.Fatal(err)
	}
	assertLocked(t, syscall.LOCK_EX) // StopRabbitApp elsewhere must wait for this test
	out, err := RabbitCtl(t, "-q", "list_vhosts")
	if err != nil {
		t.Fatal(err)
	}
	if out == "" {
		t.Fatal("rabbitmqctl list_vhosts printed nothing; want at least the default vhost")
	}
}

func TestRabbitStopStart(t *testing.T) {
	if testing.Short() {
		t.Skip("stops the machine's RabbitMQ for about a second; not run with -short")
	}
	url := AMQPURL(t)
	StopRabbitApp(t)
	assertLocked(t, syscall.LOCK_SH) // other processes' RabbitMQ tests wait for this one
	if err := openChannel(url); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial with the app stopped: %v; want connection refused", err)
	}
	start := time.Now()
	StartRabbitApp(t)
	t.Logf("start_app until AMQP answered: %v", time.Since(start).Round(time.Millisecond))
	if err := openChannel(url); err != nil {
		t.Fatal(err)
	}
}

func TestWatermarkArgs(t *testing.T) {
	for in, want := range map[string]string{
		"0.4":                   "0.4",
		"{absolute,1073741824}": "absolute 1073741824",
	} {
		got, err := watermarkArgs(in)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("watermarkArgs(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "{relative,0.4}", "[]"} {
		if _, err := watermarkArgs(bad); err == nil {
			t.Errorf("watermarkArgs(%q) accepted", bad)
		}
	}
}
