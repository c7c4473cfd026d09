// Package safetext makes text from untrusted places (broker error messages, request
// paths, records read from a shared store) safe to show: credentials taken out, and
// control characters escaped so that the text cannot forge lines in a log or move
// the cursor of a terminal. It is internal: the breaker, the shared-state engine, the
// admin handler and the CLI use the same rules.
package safetext

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every control character, every bidirectional formatting
// character and every invalid UTF-8 byte written as a Go escape (\n, \x1b, \u202e,
// \xff), and backslashes kept as they are. Text without any of them is returned as it
// is, without allocating.
func Escape(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafe(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case unsafe(r, size):
			q := strconv.QuoteRuneToASCII(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}

// unsafe reports whether the rune r (of size bytes) must be escaped.
func unsafe(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return true
	case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
		return true
	case r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
		r == 0x2028 || r == 0x2029 || r == 0xfeff:
		// Zero-width and bidirectional controls, line and paragraph separators: they
		// make a line read differently from what it says.
		return true
	}
	return false
}

// Credentials in error texts: a URL's user information (postgres://user:secret@host),
// key=value pairs whose key names a secret, bearer tokens and AWS access key IDs.
var (
	urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@`)
	secretPair  = regexp.MustCompile(`(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|credentials?|auth)(\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s&;,"')]+)`)
	bearer      = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`)
	awsKeyID    = regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`)
)

// Redacted stands where Redact took a credential out.
const Redacted = "[redacted]"

// Redact returns s with the credentials it recognises replaced by [redacted]: a URL's
// user information, the value of password=, pwd=, secret=, token=, api_key=,
// access_key= and auth= pairs (also with ':'), bearer and basic credentials, and
// AWS access key IDs. It is a safety net for error texts shown to people, not a
// guarantee: a secret in no recognisable form stays.
func Redact(s string) string {
	if !strings.ContainsAny(s, "@=:") && !strings.Contains(strings.ToLower(s), "bearer") &&
		!strings.Contains(strings.ToLower(s), "basic") && !strings.Contains(s, "AKIA") && !strings.Contains(s, "ASIA") {
		return s
	}
	s = urlUserinfo.ReplaceAllString(s, "${1}"+Redacted+"@")
	s = secretPair.ReplaceAllString(s, "${1}${2}"+Redacted)
	s = bearer.ReplaceAllString(s, "${1} "+Redacted)
	return awsKeyID.ReplaceAllString(s, Redacted)
}

// Truncate returns s cut to at most n bytes at a rune boundary, with "…" (three
// bytes, counted in n) at the end when it was cut. n below 4 is taken as 4.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 4) - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ErrorText is what people are shown of an error's text: credentials redacted,
// control characters escaped, at most n bytes.
func ErrorText(s string, n int) string {
	return Truncate(Escape(Redact(s)), n)
}
