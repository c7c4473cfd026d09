package safetext

import (
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain text: ok", "plain text: ok"},
		{"é and 日本", "é and 日本"},
		{"line\nforged", `line\nforged`},
		{"\x1b[2Jclear", `\x1b[2Jclear`},
		{"bad \xff byte", `bad \xff byte`},
		{"rtl \u202eevil", `rtl \u202eevil`},
		{"tab\tcr\r", `tab\tcr\r`},
		{"c1 \u0085", `c1 \u0085`},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Escape("nothing to escape here") }); n != 0 {
		t.Errorf("Escape of safe text allocates %v times", n)
	}
}

func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"dial postgres://app:s3cret@db:5432/x failed", "dial postgres://[redacted]@db:5432/x failed"},
		{"amqp://guest:guest@rabbit:5672/: connection refused", "amqp://[redacted]@rabbit:5672/: connection refused"},
		{"host=db user=app password=hunter2 dbname=x", "host=db user=app password=[redacted] dbname=x"},
		{`login failed: Password: "a b c"`, `login failed: Password: [redacted]`},
		{"https://x/?token=abcdef&x=1", "https://x/?token=[redacted]&x=1"},
		{"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "Authorization: Bearer [redacted]"},
		{"key AKIAABCDEFGHIJKLMNOP denied", "key [redacted] denied"},
		{"LEADER_NOT_AVAILABLE: no leader for partition 3", "LEADER_NOT_AVAILABLE: no leader for partition 3"},
	} {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
}

func TestErrorTextBounded(t *testing.T) {
	long := strings.Repeat("日", 400) // 1,200 bytes
	got := ErrorText(long, 100)
	if len(got) > 100 || !strings.HasSuffix(got, "…") {
		t.Fatalf("ErrorText of 1,200 bytes with bound 100: %d bytes %q", len(got), got)
	}
	if got := ErrorText("short", 100); got != "short" {
		t.Fatalf("ErrorText(short) = %q", got)
	}
}
