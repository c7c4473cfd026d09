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
		{"arabic letter mark \u061c", `arabic letter mark \u061c`},
		{"lrm \u200e rlm \u200f", `lrm \u200e rlm \u200f`},
		{"embeddings \u202a\u202b\u202c\u202d", `embeddings \u202a\u202b\u202c\u202d`},
		{"isolates \u2066\u2067\u2068\u2069", `isolates \u2066\u2067\u2068\u2069`},
		{"zero width \u200b\u200c\u200d\u2060\ufeff", `zero width \u200b\u200c\u200d\u2060\ufeff`},
		{"soft\u00adhyphen", `soft\u00adhyphen`},
		{"nbsp\u00a0and\u3000ideographic", `nbsp\u00a0and\u3000ideographic`},
		{"separators \u2028\u2029", `separators \u2028\u2029`},
		{"mongolian \u180e, selector \ufe0f, filler \u3164, cgj \u034f", `mongolian \u180e, selector \ufe0f, filler \u3164, cgj \u034f`},
		{"tag \U000e0041", `tag \U000e0041`},
		{"kafka:orders", "kafka:orders"},
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
		{`config {"user":"app","password":"hunter2","host":"db"}`, `config {"user":"app","password":[redacted],"host":"db"}`},
		{`{"password": "with \"quote\" inside", "n": 1}`, `{"password": [redacted], "n": 1}`},
		{`{"client_secret":"abc"}`, `{"client_secret":[redacted]}`},
		{"aws_secret_access_key=wJalrXUtnFEMI/K7MDENG aws_access_key_id=x", "aws_secret_access_key=[redacted] aws_access_key_id=x"},
		{"db_password: hunter2", "db_password: [redacted]"},
		{"X-Api-Key: 0123456789", "X-Api-Key: [redacted]"},
		{"Cookie: session=abc; theme=dark", "Cookie: [redacted]"},
		{"HTTP/1.1 200\r\nSet-Cookie: sid=xyz; HttpOnly\r\nX: y", "HTTP/1.1 200\r\nSet-Cookie: [redacted]\r\nX: y"},
		{"Authorization: AWS4-HMAC-SHA256 Credential=AK/20261203/us-east-1, Signature=abc", "Authorization: AWS4-HMAC-SHA256 [redacted]"},
		{"authorization=opaque-value", "authorization=[redacted]"},
		{`{"Authorization":"Bearer abc.def.ghi"}`, `{"Authorization":"Bearer [redacted]"}`},
		{"Proxy-Authorization: Basic dXNlcjpwYXNz", "Proxy-Authorization: Basic [redacted]"},
		{"tokens: 5 of 10 used", "tokens: 5 of 10 used"},
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
