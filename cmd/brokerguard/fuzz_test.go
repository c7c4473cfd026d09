package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzCLIAgainstService runs the on-call commands with arbitrary arguments against a
// service that answers anything with any status: the CLI parses its flags and the
// answers without panicking, and what it prints has no control character but
// newlines, whatever the service sent.
func FuzzCLIAgainstService(f *testing.F) {
	f.Add(uint8(0), "", 200, `{"now":"2026-11-30T12:00:00Z","circuits":[{"destination":"kafka:a\u001b[2J","state":"open","last_error":"x\ny"}]}`)
	f.Add(uint8(1), "kafka:orders", 200, `{"destination":"kafka:orders","unhealthy_since":"2026-11-30T12:00:00Z","failed_probes":3,"last_error":"\u001b]0;t\u0007"}`)
	f.Add(uint8(2), "kafka:orders --for 10m --token 0123456789abcdef0", 400, `{"field":"for","error":"for: bad\r\n"}`)
	f.Add(uint8(3), "kafka:orders --until 9999-12-31T00:00:00Z --token t", 404, `{"field":"destination","error":"x"}`)
	f.Add(uint8(5), "", 200, `{"pending":3,"destinations":[{"destination":"kafka:\u001bx","pending":3}],"dead":[{"reason":"a\nb","rows":1}]}`)
	f.Add(uint8(6), "--reason x --after 3", 200, `{"rows":[{"id":1,"destination":"kafka:a","reason":"r\u0007","last_error":"e"}],"next_after":1}`)
	f.Add(uint8(7), "--ids 1,2,x --token 0123456789abcdef0", 200, `{"requeued":2}`)
	f.Add(uint8(0), "--wide --json", 500, "<html>\x1b[2J")
	commands := [][]string{
		{"circuits", "list", "--wide"}, {"circuits", "show"}, {"circuits", "force-open"}, {"circuits", "force-close"},
		{"circuits", "clear"}, {"outbox", "stats"}, {"outbox", "dead"}, {"outbox", "requeue"},
	}
	f.Fuzz(func(t *testing.T, which uint8, args string, status int, body string) {
		if status < 100 || status > 599 {
			status = 200
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		defer srv.Close()
		cmd := commands[int(which)%len(commands)]
		argv := append(append([]string{}, cmd...), strings.Fields(args)...)
		argv = append(argv, "--url", srv.URL, "--timeout", "2s")
		var out, errOut bytes.Buffer
		_ = run(context.Background(), argv, &out, &errOut)
		if i := strings.IndexFunc(out.String(), func(r rune) bool { return r < 0x20 && r != '\n' || r == 0x7f }); i >= 0 {
			t.Fatalf("%v against %d %q printed a control character at %d:\n%q", argv, status, body, i, out.String())
		}
	})
}
