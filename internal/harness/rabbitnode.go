package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rabbitNodeUpWait bounds the start of a private node: the Erlang VM and the broker's
// boot take 5-10 s on an idle machine and several times that on a loaded one.
const rabbitNodeUpWait = 3 * time.Minute

// rabbitNodes numbers the private nodes of one test binary, for their node names.
var rabbitNodes atomic.Int64

// RabbitNode is a RabbitMQ node of a test's own: its own node name, AMQP and Erlang
// distribution ports, configuration, data and log directories (in a temporary
// directory) and Erlang cookie. Tests that stop the broker or raise its memory alarm
// use one, so that the broker AMQP_URL names, which other clients on the machine may
// use, never sees an outage. The node stops (by its process group) when the test
// ends.
type RabbitNode struct {
	name string // bgtest-<pid>-<n>@localhost
	dir  string // HOME, config, mnesia and logs
	port int    // AMQP
	dist int    // Erlang distribution
	run  *child
}

// NewRabbitNode starts a private RabbitMQ node for the test and waits until it accepts
// AMQP connections. Without a RabbitMQ installation the test skips (or fails under
// CI=true), through Require. It starts in tens of seconds, so only tests that need to
// stop or alarm a broker use one.
func NewRabbitNode(t testing.TB) *RabbitNode {
	t.Helper()
	n, err := startRabbitNode(t.TempDir())
	Require(t, ServiceRabbitMQ, err)
	t.Cleanup(func() { _ = n.run.stop(30 * time.Second) })
	return n
}

// rabbitBin returns the path of a RabbitMQ script: the one in RabbitMQ's own bin
// directory when there is one (Debian's /usr/sbin wrappers switch to the rabbitmq user,
// which could read neither the temporary directory nor its cookie), else PATH's.
func rabbitBin(name string) (string, error) {
	for _, dir := range []string{"/usr/lib/rabbitmq/bin", "/opt/rabbitmq/sbin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

func startRabbitNode(dir string) (*RabbitNode, error) {
	n := &RabbitNode{dir: dir, name: fmt.Sprintf("bgtest-%d-%d@localhost", os.Getpid(), rabbitNodes.Add(1))}
	fail := func(err error) (*RabbitNode, error) {
		return nil, &UnavailableError{Service: ServiceRabbitMQ, Addr: "private node " + n.name,
			Hint: "install RabbitMQ (rabbitmq-server)", Err: err}
	}
	server, err := rabbitBin("rabbitmq-server")
	if err != nil {
		return fail(err)
	}
	if n.port, err = freePort(); err == nil {
		n.dist, err = freePort()
	}
	if err != nil {
		return fail(err)
	}
	files := map[string]string{
		"rabbitmq.conf":     "listeners.tcp.1 = 127.0.0.1:" + strconv.Itoa(n.port) + "\n",
		"enabled_plugins":   "[].\n", // no management plugin: its port 15672 is the machine's broker's
		"rabbitmq-env.conf": "",      // the machine's names the machine's node
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return fail(err)
		}
	}
	// epmd, Erlang's name server, is shared by every node of the machine. Started by the
	// node, it would be in the node's process group and die with it: start it detached
	// first (a no-op when it runs).
	if epmd, err := exec.LookPath("epmd"); err == nil {
		_ = exec.Command(epmd, "-daemon", "-address", "127.0.0.1").Run()
	}
	cmd := exec.Command(server)
	cmd.Env = append(os.Environ(), n.env()...)
	n.run, err = startChild(cmd, filepath.Join(dir, "server.log"), n.Addr(), rabbitNodeUpWait, 30*time.Second)
	if err != nil {
		return fail(err)
	}
	if err := waitAMQP(n.URL(), rabbitUpTimeout); err != nil {
		_ = n.run.stop(30 * time.Second)
		return fail(err)
	}
	return n, nil
}

// env is the environment of the node and of rabbitmqctl calls to it.
func (n *RabbitNode) env() []string {
	return []string{
		"HOME=" + n.dir, // the Erlang cookie of this node and its rabbitmqctl calls
		"RABBITMQ_NODENAME=" + n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(n.port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(n.dist),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(n.dir, "log"),
		"RABBITMQ_PID_FILE=" + filepath.Join(n.dir, "rabbitmq.pid"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"ERL_EPMD_ADDRESS=127.0.0.1",
	}
}

// Addr returns the node's AMQP host:port.
func (n *RabbitNode) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// URL returns the node's AMQP URL (guest/guest, the default virtual host).
func (n *RabbitNode) URL() string { return "amqp://guest:guest@" + n.Addr() + "/" }

// Name returns the node's Erlang node name, for rabbitmqctl -n.
func (n *RabbitNode) Name() string { return n.name }

// Ctl runs rabbitmqctl against this node (bounded by a minute) and returns its
// combined output.
func (n *RabbitNode) Ctl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctl, err := rabbitBin("rabbitmqctl")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), rabbitCtlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctl, append([]string{"-n", n.name}, args...)...)
	cmd.Env = append(os.Environ(), n.env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("harness: rabbitmqctl -n %s %v: %w: %s", n.name, args, err, oneLine(string(out)))
	}
	return string(out), nil
}

// StopApp stops the node's RabbitMQ application (the Erlang node keeps running), so
// clients see refused connections, until StartApp.
func (n *RabbitNode) StopApp(t testing.TB) {
	t.Helper()
	if _, err := n.Ctl(t, "-q", "stop_app"); err != nil {
		t.Fatal(err)
	}
}

// StartApp starts the application again and waits until the node accepts AMQP
// connections; the test fails if it does not within a minute.
func (n *RabbitNode) StartApp(t testing.TB) {
	t.Helper()
	if _, err := n.Ctl(t, "-q", "start_app"); err != nil {
		t.Fatal(err)
	}
	if err := waitAMQP(n.URL(), rabbitUpTimeout); err != nil {
		t.Fatalf("harness: RabbitMQ node %s not serving AMQP %v after start_app: %v", n.name, rabbitUpTimeout, err)
	}
}

// Block raises the node's memory alarm, by setting its memory high watermark far below
// what the node uses, and waits until the alarm is on: the node then blocks the
// connections that publish (connection.blocked). Unblock clears it, and so does the
// cleanup Block registers, which runs before the cleanups of clients created earlier
// in the test: a blocked node would not answer their connection.close.
func (n *RabbitNode) Block(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		if _, err := n.Ctl(t, "-q", "set_vm_memory_high_watermark", "0.4"); err != nil {
			t.Errorf("harness: unblock: %v", err)
		} else if err := n.waitAlarm(t, false); err != nil {
			t.Error(err)
		}
	})
	if _, err := n.Ctl(t, "-q", "set_vm_memory_high_watermark", "0.0000001"); err != nil {
		t.Fatal(err)
	}
	if err := n.waitAlarm(t, true); err != nil {
		t.Fatal(err)
	}
}

// Unblock sets the memory high watermark back to RabbitMQ's default and waits until
// the alarm is off.
func (n *RabbitNode) Unblock(t testing.TB) {
	t.Helper()
	if _, err := n.Ctl(t, "-q", "set_vm_memory_high_watermark", "0.4"); err != nil {
		t.Fatal(err)
	}
	if err := n.waitAlarm(t, false); err != nil {
		t.Fatal(err)
	}
}

// waitAlarm polls the node's alarms until one is on (on) or none is, for a minute.
func (n *RabbitNode) waitAlarm(t testing.TB, on bool) error {
	deadline := time.Now().Add(rabbitUpTimeout)
	for {
		out, err := n.Ctl(t, "-q", "eval", "rabbit_alarm:get_alarms().")
		if err == nil && (strings.TrimSpace(out) != "[]") == on {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("harness: RabbitMQ node %s alarm still %v after %v (%s, %v)", n.name, !on, rabbitUpTimeout, oneLine(out), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
