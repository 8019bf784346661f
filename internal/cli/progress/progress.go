// Package progress draws a one-line progress bar for a transfer of known
// size on a terminal: bytes done of the total, percent and rate.
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/cli/human"
)

// Threshold is the size from which `hutch cp` shows a bar: smaller
// transfers end before a bar would tell anything.
const Threshold = 1 << 20

// redrawInterval is the least time between two redraws.
const redrawInterval = 100 * time.Millisecond

// barWidth is the number of cells of the bar itself.
const barWidth = 24

// Bar is a progress bar drawn on a terminal. Count bytes with Add, or
// through Reader and Writer; call Finish once at the end. Its methods are
// safe for concurrent use.
type Bar struct {
	w     io.Writer
	label string
	total int64
	now   func() time.Time

	mu       sync.Mutex
	n        int64
	start    time.Time
	lastDraw time.Time
	finished bool
}

// New returns a bar for a transfer of total bytes, drawn on w (a terminal:
// the bar is redrawn in place with a carriage return) and labelled label.
func New(w io.Writer, label string, total int64) *Bar {
	return newBar(w, label, total, time.Now)
}

func newBar(w io.Writer, label string, total int64, now func() time.Time) *Bar {
	return &Bar{w: w, label: label, total: total, now: now, start: now()}
}

// Add counts n more bytes and redraws the bar if it was not redrawn
// recently.
func (b *Bar) Add(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += int64(n)
	if t := b.now(); !b.finished && t.Sub(b.lastDraw) >= redrawInterval {
		b.lastDraw = t
		b.draw(t)
	}
}

// Finish draws the bar a last time and ends its line. Later calls do
// nothing.
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.finished = true
	b.draw(b.now())
	fmt.Fprintln(b.w)
}

// draw writes the bar's line; b.mu is held.
func (b *Bar) draw(t time.Time) {
	fmt.Fprintf(b.w, "\r%s\x1b[K", b.line(t))
}

// line is the bar's text: label, bar, done/total, percent, rate.
func (b *Bar) line(t time.Time) string {
	pct := 100.0
	if b.total > 0 {
		pct = min(100, float64(b.n)*100/float64(b.total))
	}
	full := int(pct / 100 * barWidth)
	bar := strings.Repeat("=", full)
	if full < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-full-1)
	}
	rate := ""
	if el := t.Sub(b.start).Seconds(); el > 0 {
		rate = "  " + human.Bytes(int64(float64(b.n)/el)) + "/s"
	}
	return fmt.Sprintf("%s [%s] %s / %s  %3.0f%%%s", b.label, bar, human.Bytes(b.n), human.Bytes(b.total), pct, rate)
}

// Reader returns a reader that counts what it reads from r on the bar.
func (b *Bar) Reader(r io.Reader) io.Reader { return &countingReader{r: r, b: b} }

// Writer returns a writer that counts what it writes to w on the bar.
func (b *Bar) Writer(w io.Writer) io.Writer { return &countingWriter{w: w, b: b} }

type countingReader struct {
	r io.Reader
	b *Bar
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.b.Add(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	b *Bar
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.b.Add(n)
	return n, err
}
