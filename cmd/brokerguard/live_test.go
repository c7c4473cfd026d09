package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeTerminal interprets what the live screen writes the way a terminal would: text,
// newlines, carriage returns, "ESC [ n A" (cursor up), "ESC [ J" (erase below) and
// "ESC [ ? 7 l" and "h" (autowrap off and on). With a width, a line wider wraps to the
// next row, or with autowrap off keeps overwriting the last column. Any other escape
// sequence fails the test. It is safe for concurrent use.
type fakeTerminal struct {
	t        *testing.T
	width    int // 0: unlimited
	mu       sync.Mutex
	rows     []string
	row, col int
	nowrap   bool
	raw      strings.Builder
}

var csi = regexp.MustCompile(`^\x1b\[(\??\d*)([A-Za-z])`)

func (f *fakeTerminal) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.raw.Write(p)
	s := string(p)
	for len(s) > 0 {
		if m := csi.FindStringSubmatch(s); m != nil {
			n, _ := strconv.Atoi(m[1])
			switch {
			case m[1] == "?7" && (m[2] == "l" || m[2] == "h"):
				f.nowrap = m[2] == "l"
			case m[2] == "A" && n > 0:
				if n > f.row {
					f.t.Errorf("cursor up %d from row %d: above the first line", n, f.row)
				}
				f.row = max(f.row-n, 0)
			case m[0] == "\x1b[J":
				f.grow()
				f.rows = append(f.rows[:f.row], f.rows[f.row][:min(f.col, len(f.rows[f.row]))])
			default:
				f.t.Errorf("unexpected escape sequence %q", m[0])
			}
			s = s[len(m[0]):]
			continue
		}
		switch c := s[0]; c {
		case '\n': // the terminal's output processing turns it into CR LF
			f.row, f.col = f.row+1, 0
		case '\r':
			f.col = 0
		case 0x1b:
			f.t.Errorf("malformed escape sequence in %q", s)
		default:
			if f.width > 0 && f.col >= f.width {
				if f.nowrap {
					f.col = f.width - 1
				} else {
					f.row, f.col = f.row+1, 0
				}
			}
			f.grow()
			line := f.rows[f.row]
			line += strings.Repeat(" ", max(f.col-len(line), 0))
			f.rows[f.row] = line[:f.col] + string(c) + line[min(f.col+1, len(line)):]
			f.col++
		}
		s = s[1:]
	}
	return len(p), nil
}

// grow makes the cursor's row exist.
func (f *fakeTerminal) grow() {
	for len(f.rows) <= f.row {
		f.rows = append(f.rows, "")
	}
}

// screen returns the lines on the screen, the cursor's empty last line left out.
func (f *fakeTerminal) screen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	rows := f.rows
	if n := len(rows); n > 0 && rows[n-1] == "" {
		rows = rows[:n-1]
	}
	return rows
}

func TestScreenLiveRedrawsTheTableInPlace(t *testing.T) {
	term := &fakeTerminal{t: t}
	s := newScreen(term, true)
	s.update([]string{"transition 1"}, "T1 a\nT1 b\nT1 c\n")
	s.Write([]byte("outage\n"))
	s.update([]string{"transition 2", "transition 3"}, "T2 a\nT2 b\n") // a shorter table
	s.update(nil, "T3 a\nT3 b\nT3 c\n")
	s.keep()
	s.Write([]byte("summary\n"))

	want := []string{"transition 1", "outage", "transition 2", "transition 3", "T3 a", "T3 b", "T3 c", "summary"}
	if got := term.screen(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Each redraw moves up exactly the lines the table on the screen took.
	raw := term.raw.String()
	var seqs []string
	for _, m := range regexp.MustCompile(`\x1b\[(\d*)([AJ])`).FindAllStringSubmatch(raw, -1) {
		seqs = append(seqs, m[1]+m[2])
	}
	if got := strings.Join(seqs, " "); got != "3A J 3A J 2A J" {
		t.Fatalf("escape sequences %q, want cursor up 3, 3, 2 lines, each followed by erase below", got)
	}
	if n := strings.Count(raw, "\x1b[?7l"); n != 4 || strings.Count(raw, "\x1b[?7h") != n {
		t.Fatalf("autowrap turned off %d times and on %d times, want around each of the 4 tables drawn", n, strings.Count(raw, "\x1b[?7h"))
	}
	if strings.Count(raw, "summary") != 1 || strings.HasSuffix(raw, "T3 c\n") {
		t.Fatalf("after keep, output went through the redraw: %q", raw)
	}
}

// On a terminal narrower than the table, its lines are cut at the edge instead of
// wrapping, so the redraw still moves up over exactly the table; lines above it wrap.
func TestScreenLiveOnANarrowTerminal(t *testing.T) {
	term := &fakeTerminal{t: t, width: 8}
	s := newScreen(term, true)
	s.update(nil, "table one, wide\nsecond line, wide\n")
	s.update([]string{"a transition, wide"}, "table two, wide\nsecond line, wide\n")
	want := []string{"a transi", "tion, wi", "de", "table te", "second e"}
	if got := term.screen(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("screen %q, want %q", got, want)
	}
}

func TestScreenPlainPrintsEveryTable(t *testing.T) {
	var out strings.Builder
	s := newScreen(&out, false)
	s.update([]string{"transition 1"}, "T1\n")
	s.Write([]byte("outage\n"))
	s.update(nil, "T2\n")
	if got, want := out.String(), "transition 1\nT1\noutage\nT2\n"; got != want {
		t.Fatalf("plain output %q, want %q", got, want)
	}
}

func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, w := range map[string]io.Writer{"a pipe": w, "a file": f, "a strings.Builder": &strings.Builder{}} {
		if isTerminal(w) {
			t.Errorf("%s taken for a terminal", name)
		}
	}
}
