package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// TestCLIOutputEscapesStoreText: whoever can write the shared state can put escape
// sequences in a lease owner, a reason, the policy text or the last error; the CLI
// prints them escaped, in every table.
func TestCLIOutputEscapesStoreText(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := filestate.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := sharedstate.Record{
		Version: 1, Fingerprint: "f", Policy: "FailureThreshold=3\x1b[2J", State: breaker.HalfOpen, Generation: 2,
		Failures: 3, FailedProbes: 4,
		Leases: []sharedstate.Lease{{ID: 7, Owner: "host\r\nbrokerguard: force-close kafka:payments", Expires: now.Add(time.Minute).UnixNano()}},
		Reason: "break_elapsed\x1b]0;pwned\x07", Since: now.UnixNano(),
		LastError: "LEADER_NOT_AVAILABLE\x1b[31m", LastErrorAt: now.UnixNano(), UnhealthySince: now.Add(-time.Minute).UnixNano(),
	}
	if err := store.Driver().Replace(context.Background(), "kafka:orders", 0, rec); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"show", "kafka:orders", "--state-dir", dir},
		{"list", "--wide", "--state-dir", dir},
	} {
		out, errOut, code := cli(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, errOut)
		}
		if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' || r == 0x7f }); i >= 0 {
			t.Errorf("%v prints a control character at %d:\n%q", args, i, out)
		}
		if !strings.Contains(out, `LEADER_NOT_AVAILABLE\x1b[31m`) {
			t.Errorf("%v does not show the last error:\n%s", args, out)
		}
		if args[0] == "show" && (!strings.Contains(out, "unhealthy since") || !strings.Contains(out, "4 failed probes") ||
			!strings.Contains(out, `host\r\nbrokerguard: force-close`)) {
			t.Errorf("show does not say since when, how many probes failed, or who holds the lease:\n%s", out)
		}
	}
}

// TestDemoServerTimeouts: a connection that holds back its body, or stays idle
// after an answer, is closed by the demo's server once its timeout passes (the
// server used to set only a header timeout, so both stayed open for ever).
func TestDemoServerTimeouts(t *testing.T) {
	saved := serverTimeouts
	t.Cleanup(func() { serverTimeouts = saved })
	serverTimeouts.header, serverTimeouts.read, serverTimeouts.write, serverTimeouts.idle = time.Second, 300*time.Millisecond, time.Second, 300*time.Millisecond
	var servers webServers
	defer servers.close()
	mux, base, err := servers.mux("--http", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	addr := strings.TrimPrefix(base, "http://")
	for name, send := range map[string]string{
		"body held back": "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
		"idle":           "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte(send)); err != nil {
			t.Fatal(err)
		}
		// The server must close the connection: reading ends (EOF or reset) well
		// before this deadline, which only keeps a failing test from hanging.
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: the connection was still open after 10 s", name)
		}
		conn.Close()
	}
}
