package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// screen is where the demo writes. Plain, it passes lines through and prints each
// table anew below the last, which suits pipes, files and tests. Live, on a terminal,
// it keeps one table at the bottom and redraws it in place: before anything is written
// it moves the cursor up over the table and clears to the end of the screen, so
// transitions and other lines scroll by above the table.
//
// It is safe for concurrent use: the dispatcher's error handler and the dashboard's
// audit hook write from their own goroutines.
type screen struct {
	out  io.Writer
	live bool

	mu    sync.Mutex // guards table and drawn, and orders writes to out
	table string     // the last table, redrawn after other output (live only)
	drawn int        // lines of table on the screen below the cursor's line (live only)
}

func newScreen(out io.Writer, live bool) *screen { return &screen{out: out, live: live} }

// Write writes p, which should be whole lines, above the table.
func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drawn == 0 {
		return s.out.Write(p)
	}
	var b strings.Builder
	s.erase(&b)
	b.Write(p)
	s.draw(&b, s.table)
	if _, err := io.WriteString(s.out, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// update writes lines, then table. Live, the new table replaces the one on the
// screen, in one write so the terminal never shows a half-drawn table.
func (s *screen) update(lines []string, table string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	s.erase(&b)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	s.draw(&b, table)
	_, err := io.WriteString(s.out, b.String())
	return err
}

// keep leaves the table on the screen as it is: what is written next goes below it.
func (s *screen) keep() {
	s.mu.Lock()
	s.table, s.drawn = "", 0
	s.mu.Unlock()
}

// erase moves the cursor to the first line of the table and clears from there to the
// end of the screen ("ESC [ n A" cursor up, carriage return, "ESC [ J" erase below).
// Requires s.mu held.
func (s *screen) erase(b *strings.Builder) {
	if s.drawn > 0 {
		fmt.Fprintf(b, "\x1b[%dA\r\x1b[J", s.drawn)
	}
	s.drawn = 0
}

// draw writes table and, live, remembers it and how many lines it took. Live, the
// terminal's autowrap is off while the table is drawn ("ESC [ ? 7 l", then "ESC [ ? 7
// h"): a line wider than the terminal is cut at its edge rather than wrapped, so each
// line of the table takes one row and erase moves up over exactly the table. Requires
// s.mu held.
func (s *screen) draw(b *strings.Builder, table string) {
	if !s.live {
		b.WriteString(table)
		return
	}
	b.WriteString("\x1b[?7l")
	b.WriteString(table)
	b.WriteString("\x1b[?7h")
	s.table, s.drawn = table, strings.Count(table, "\n")
}

// isTerminal reports whether w is a character device, as a terminal is, without a
// dependency on a terminal package. TERM=dumb asks for plain output.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
