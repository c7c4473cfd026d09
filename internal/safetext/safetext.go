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
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every character that is not what it looks like written as a
// Go escape (\n, \x1b, \u202e, \u061c, \xff): control characters, format characters
// (bidirectional marks, embeddings, overrides and isolates, zero-width characters,
// the soft hyphen, tags), other invisible ones (variation selectors, fillers),
// spaces other than U+0020, line and paragraph separators, and invalid UTF-8 bytes.
// Two names that print alike are then told apart ("kafka:orders" and
// "kafka:\u200borders"), and no text can reorder, hide or forge what follows it on
// a line. Backslashes are kept as they are. Text without any of them is returned as
// it is, without allocating.
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
	case r >= 0x20 && r < 0x7f: // printable ASCII, the common case
		return false
	case r == utf8.RuneError && size == 1:
		return true
	case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
		return true
	case r < 0xa0:
		return false
	}
	// Format characters (Cf: U+00AD, U+061C, U+200B-200F, U+202A-202E, U+2060-206F,
	// U+FEFF, tags, ...), separators other than the ASCII space (U+00A0, U+2000-200A,
	// U+2028, U+2029, U+3000, ...) and the default-ignorable characters outside Cf:
	// they make a line read differently from what it says.
	return unicode.In(r, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp, invisible)
}

// invisible is the default-ignorable code points (Unicode's
// Default_Ignorable_Code_Point) that are not format characters: a combining grapheme
// joiner, Hangul and halfwidth fillers, Khmer inherent vowels, Mongolian free
// variation selectors, variation selectors and their supplement.
var invisible = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x034f, Hi: 0x034f, Stride: 1},
		{Lo: 0x115f, Hi: 0x1160, Stride: 1},
		{Lo: 0x17b4, Hi: 0x17b5, Stride: 1},
		{Lo: 0x180b, Hi: 0x180f, Stride: 1},
		{Lo: 0x3164, Hi: 0x3164, Stride: 1},
		{Lo: 0xfe00, Hi: 0xfe0f, Stride: 1},
		{Lo: 0xffa0, Hi: 0xffa0, Stride: 1},
	},
	R32: []unicode.Range32{
		{Lo: 0xe0100, Hi: 0xe01ef, Stride: 1},
	},
}

// Credentials in error texts: a URL's user information (postgres://user:secret@host),
// the values of HTTP headers that carry them, key=value pairs (JSON and YAML ones too)
// whose key names a secret, bearer tokens and AWS access key IDs.
var (
	urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@`)
	// Authorization and Proxy-Authorization keep their scheme ("Bearer [redacted]");
	// Cookie and Set-Cookie lose their whole value, every cookie in it.
	authHeader   = regexp.MustCompile(`(?i)\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?)((?:bearer|basic|digest|negotiate|aws4-hmac-sha256)\s+)?[^"'\r\n]+`)
	cookieHeader = regexp.MustCompile(`(?i)\b((?:set-)?cookie["']?\s*[:=]\s*["']?)[^"'\r\n]+`)
	// A key that ends in a secret's name, with any prefix: password, db_password,
	// client_secret, aws_secret_access_key, X-Api-Key, refresh_token; a closing quote
	// after it for JSON; a value quoted (escapes included) or bare.
	secretPair = regexp.MustCompile(`(?i)\b([A-Za-z0-9_.-]*?(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|credentials?|auth)["']?)(\s*[=:]\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s&;,"')}]+)`)
	bearer     = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`)
	awsKeyID   = regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`)
)

// Redacted stands where Redact took a credential out.
const Redacted = "[redacted]"

// Redact returns s with the credentials it recognises replaced by [redacted]: a URL's
// user information; the values of Authorization and Proxy-Authorization (after
// their scheme) and of Cookie and Set-Cookie; the value of a pair, in key=value,
// key: value or JSON "key":"value" form, whose key ends in password, passwd, pwd,
// secret, token, api_key, access_key, secret_key, credentials or auth (so
// aws_secret_access_key= and "client_secret": too); bearer and basic credentials;
// and AWS access key IDs. It is a safety net for error texts shown to people, not a
// guarantee: a secret in no recognisable form stays.
func Redact(s string) string {
	if !strings.ContainsAny(s, "@=:") && !strings.Contains(strings.ToLower(s), "bearer") &&
		!strings.Contains(strings.ToLower(s), "basic") && !strings.Contains(s, "AKIA") && !strings.Contains(s, "ASIA") {
		return s
	}
	s = urlUserinfo.ReplaceAllString(s, "${1}"+Redacted+"@")
	s = authHeader.ReplaceAllString(s, "${1}${2}"+Redacted)
	s = cookieHeader.ReplaceAllString(s, "${1}"+Redacted)
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
