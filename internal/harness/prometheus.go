package harness

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// servicePrometheus names Debian's prometheus package (the prometheus server and
// promtool) in messages.
const servicePrometheus = "Prometheus"

const prometheusHint = "install it with `apt-get install -y prometheus` (make services does)"

// Promtool returns the path of promtool, or ends the test through Require.
func Promtool(t testing.TB) string {
	t.Helper()
	return binary(t, "promtool")
}

func binary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Require(t, servicePrometheus, &UnavailableError{Service: servicePrometheus, Hint: prometheusHint, Err: err})
	}
	return path
}

// Prometheus starts a Prometheus server of its own for the test: the config and the
// files beside it (rule files, say) are written to a temporary directory, which also
// holds its data, and it listens on a free loopback port. It returns the server's base
// URL once the server is ready. The process is killed when the test ends, also on
// failure; its log is printed when the test failed. The machine's own prometheus
// service, if any, is left alone.
func Prometheus(t testing.TB, config string, files map[string]string) string {
	t.Helper()
	bin := binary(t, "prometheus")
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		Require(t, servicePrometheus, &UnavailableError{Service: servicePrometheus, Hint: prometheusHint, Err: err})
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus log:\n%s", strings.TrimSpace(log.String()))
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited at start: %s", strings.TrimSpace(log.String()))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready on %s after 30s: %v", addr, err)
		}
	}
}
