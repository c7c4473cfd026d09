package admin_test

import (
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/brokerguard/brokerguard/admin"
)

// TestAuditFieldsCannotForgeLines: a refused request's path goes to the audit hook as
// its destination and action; a newline or ESC in it must not reach a text log as is.
func TestAuditFieldsCannotForgeLines(t *testing.T) {
	f := newFixture(t, admin.WithMutations(token))
	forged := "/api/circuits/kafka:orders%0A2026-11-30T12:00:00Z%20force-close%20kafka:payments%20applied/force-open%1B[2J"
	f.do(t, req{method: "POST", path: forged, body: `{"for":"1m","reason":"ok\r\nforged line"}`, header: authJSON()})
	f.do(t, req{method: "POST", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"1m","reason":"ok\nforged line\u001b]0;title\u0007"}`, header: authJSON()})
	// Invisible and bidirectional characters: a destination that reads as another.
	f.do(t, req{method: "POST", path: "/api/circuits/kafka:%D8%9Corders%E2%80%8F%E2%80%AE/force-open", body: `{"for":"1m"}`, header: authJSON()})
	if len(f.audits) != 3 {
		t.Fatalf("audits: %+v", f.audits)
	}
	for _, ev := range f.audits {
		for name, v := range map[string]string{"Action": ev.Action, "Destination": ev.Destination, "Reason": ev.Reason, "Err": ev.Err} {
			if strings.IndexFunc(v, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) >= 0 {
				t.Errorf("audit %s holds a control or format character: %q", name, v)
			}
		}
	}
	if !strings.Contains(f.audits[0].Destination, `kafka:orders\n2026`) || !strings.Contains(f.audits[0].Action, `\x1b[2J`) {
		t.Errorf("the escaped path no longer says what was sent: %+v", f.audits[0])
	}
	if got := f.audits[2].Destination; got != `kafka:\u061corders\u200f\u202e` {
		t.Errorf("invisible characters in the audit's destination: %q", got)
	}
}

// TestHoldYears: whatever WithMaxHold allows, a hold past 2261 is refused (it would be
// stored as Unix nanoseconds and read back as 1970).
func TestHoldYears(t *testing.T) {
	f := newFixture(t, admin.WithMutations(token), admin.WithMaxHold(1<<62))
	for _, body := range []string{`{"until":"9999-12-31T00:00:00Z"}`, `{"for":"2562047h"}`} {
		code, c := f.do(t, req{method: "POST", path: "/api/circuits/kafka:orders/force-open", body: body, header: authJSON()})
		if code != 400 || !strings.Contains(c["error"].(string), "outside the years 1970 to 2261") {
			t.Errorf("hold %s: %d %v; want 400 naming the year range", body, code, c)
		}
	}
	code, c := f.do(t, req{method: "POST", path: "/api/circuits/kafka:orders/force-open", body: `{"for":"25h"}`, header: authJSON()})
	if code != 200 {
		t.Fatalf("a 25 h hold with WithMaxHold(292 years): %d %v", code, c)
	}
	if until, _ := time.Parse(time.RFC3339, c["override_until"].(string)); !until.Equal(t0.Add(25 * time.Hour)) {
		t.Fatalf("override_until %v", c["override_until"])
	}
}
