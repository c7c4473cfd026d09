package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"testing"
)

// Publishes to the prefix pass while the share is 0; at share 1 each one is answered
// on its reply subject with the fault's answer, for the subscription the reply
// reaches, and never reaches the server; publishes to other subjects always pass.
func TestNATSFaultFailsAShareOfPublishes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server of its own; skipped under -short")
	}
	server := NewNATSServer(t)
	f := NewNATSFault(t, server.Addr(), "js.")
	c, err := net.Dial("tcp", f.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	next := func() (string, []byte) { // the next message, past INFO, PING and PONG
		t.Helper()
		for {
			frame, args, err := readFrame(r)
			if err != nil {
				t.Fatal(err)
			}
			switch string(args[0]) {
			case "INFO", "PONG":
				continue
			case "PING":
				fmt.Fprint(c, "PONG\r\n")
				continue
			}
			head, body, _ := bytes.Cut(frame, []byte("\r\n"))
			return string(head), bytes.TrimSuffix(body, []byte("\r\n"))
		}
	}
	fmt.Fprint(c, "CONNECT {\"verbose\":false}\r\nSUB js.> 1\r\nSUB other.> 2\r\nSUB _INBOX.t.* 3\r\nPING\r\n")
	fmt.Fprint(c, "PUB js.a _INBOX.t.1 2\r\nhi\r\n")
	if head, body := next(); head != "MSG js.a 1 _INBOX.t.1 2" || string(body) != "hi" {
		t.Fatalf("at share 0: %q %q, want the publish delivered", head, body)
	}

	f.SetFailShare(1)
	fmt.Fprint(c, "PUB js.b _INBOX.t.2 2\r\nhi\r\nPUB other.c _INBOX.t.4 2\r\nho\r\n")
	if head, body := next(); head != fmt.Sprintf("MSG _INBOX.t.2 3 %d", len(natsUnavailable)) || string(body) != natsUnavailable {
		t.Fatalf("at share 1: %q %q, want the fault's answer on the reply subject", head, body)
	}
	if head, body := next(); head != "MSG other.c 2 _INBOX.t.4 2" || string(body) != "ho" {
		t.Fatalf("another subject at share 1: %q %q, want it delivered", head, body)
	}
	if seen, failed := f.Seen.Load(), f.Failed.Load(); seen != 2 || failed != 1 {
		t.Errorf("%d publishes seen, %d failed; want 2 and 1", seen, failed)
	}
}
