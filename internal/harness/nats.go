package harness

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// serviceNATS names NATS JetStream in messages and in UnavailableError.Service.
const serviceNATS = "NATS JetStream"

// DefaultNATSURL is the URL used when NATS_URL is unset: the machine's nats-server.
const DefaultNATSURL = "nats://127.0.0.1:4222"

const natsHint = "start it with `start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- " +
	"-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log` (make services does) or set NATS_URL"

// natsUpWait bounds waiting for the machine's server after starting it.
const natsUpWait = 15 * time.Second

// startNATSOnce makes the harness try to start the local server at most once per test
// binary.
var startNATSOnce sync.Once

// natsLookup returns NATS_URL (or DefaultNATSURL) once a server there greets with an INFO
// that says JetStream is on. When NATS_URL is unset and nothing listens on the
// default address, it tries once to start the machine's nats-server with the
// machine's own command and waits up to 15 seconds. The harness needs no NATS client:
// the greeting is read from the socket.
func natsLookup() (string, error) {
	raw, isDefault := envOr("NATS_URL", DefaultNATSURL)
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", &UnavailableError{Service: serviceNATS, Addr: raw, Hint: natsHint,
			Err: fmt.Errorf("harness: NATS_URL must be nats://host:port: %v", err)}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "4222")
	}
	err = reach(addr, isDefault, &startNATSOnce, startLocalNATS, func() error { return waitDial(addr, natsUpWait) }, jetStreamOn)
	if err != nil {
		return "", &UnavailableError{Service: serviceNATS, Addr: raw, Hint: natsHint, Err: err}
	}
	return raw, nil
}

// startLocalNATS starts the machine's nats-server on the default address with
// JetStream, as the machine's own start-up does. Failures are ignored: the caller's
// next probe reports whether the server came up.
func startLocalNATS() {
	ctx, cancel := context.WithTimeout(context.Background(), natsUpWait)
	defer cancel()
	_ = exec.CommandContext(ctx, "start-stop-daemon", "--start", "--oknodo", "--background",
		"--exec", "/usr/sbin/nats-server", "--", "-a", "127.0.0.1", "-p", "4222", "-js",
		"-sd", "/var/lib/nats-server", "-l", "/var/log/nats-server.log").Run()
}

// jetStreamOn reads the server's INFO greeting at addr and reports an error unless
// it announces JetStream.
func jetStreamOn(addr string) error {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(dialTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	switch {
	case err != nil:
		return fmt.Errorf("harness: no INFO from %s: %w", addr, err)
	case !strings.HasPrefix(line, "INFO "):
		return fmt.Errorf("harness: %s does not speak NATS: %q", addr, oneLine(line))
	case !strings.Contains(line, `"jetstream":true`):
		return fmt.Errorf("harness: the server at %s runs without JetStream (start it with -js)", addr)
	}
	return nil
}

// NATSURL returns the URL of the shared NATS server for a test, after Require on
// natsLookup's error. Other tests use the same server at the same time: give streams and
// subjects names of their own (a test's streams are deleted by the test).
func NATSURL(t testing.TB) string {
	t.Helper()
	u, err := natsLookup()
	Require(t, serviceNATS, err)
	return u
}

// NATSServer is a private nats-server child process with JetStream on a fixed
// loopback port, for a test that stops, restarts or stalls NATS without touching the
// machine's server. Its JetStream store is in its directory, so Stop followed by Start
// brings back the same streams and messages on the same address. One goroutine waits
// for the process while it runs. Create one with NewNATSServer;
// the zero value is not usable.
type NATSServer struct{ server }

// NewNATSServer starts a private nats-server for the test (see startNATSServer) and
// stops it when the test ends, whether or not the test passed. Errors go through
// Require.
func NewNATSServer(t testing.TB) *NATSServer {
	t.Helper()
	return startForTest(t, serviceNATS, startNATSServer)
}

// startNATSServer starts the machine's nats-server binary (`nats-server -js`) on a
// free loopback port with its store in dir (a new temporary directory, removed by
// Close, when dir is empty) and waits until it greets with JetStream on.
func startNATSServer(dir string) (*NATSServer, error) {
	s := &NATSServer{server{dir: dir, log: "nats-server.log", ready: jetStreamOn}}
	s.fail = func(err error) error {
		return &UnavailableError{Service: serviceNATS, Addr: s.Addr(),
			Hint: "install Debian's nats-server (scripts/services.sh does)", Err: err}
	}
	s.command = func() (*exec.Cmd, error) {
		bin, err := exec.LookPath("nats-server")
		if err != nil {
			if bin, err = exec.LookPath("/usr/sbin/nats-server"); err != nil {
				return nil, err
			}
		}
		return exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir), nil
	}
	if err := startServer(&s.server, "nats-"); err != nil {
		return nil, err
	}
	return s, nil
}

// Addr returns the server's host:port.
func (s *NATSServer) Addr() string { return s.addr() }

// URL returns the server's nats:// URL.
func (s *NATSServer) URL() string { return "nats://" + s.addr() }
