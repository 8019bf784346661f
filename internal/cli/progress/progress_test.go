package progress

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// fakeClock advances by step at every reading.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.t = c.t.Add(c.step)
	return c.t
}

func TestBarLine(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0), step: 0}
	tests := []struct {
		name  string
		total int64
		n     int64
		el    time.Duration
		want  string
	}{
		{"start", 4 << 20, 0, 0, "up [>                       ] 0 B / 4.0 MiB    0%"},
		{"half", 4 << 20, 2 << 20, time.Second, "up [============>           ] 2.0 MiB / 4.0 MiB   50%  2.0 MiB/s"},
		{"done", 4 << 20, 4 << 20, 2 * time.Second, "up [========================] 4.0 MiB / 4.0 MiB  100%  2.0 MiB/s"},
		{"beyond the estimate", 1 << 20, 3 << 20, time.Second, "up [========================] 3.0 MiB / 1.0 MiB  100%  3.0 MiB/s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBar(io.Discard, "up", tt.total, clock.now)
			b.n = tt.n
			if got := b.line(b.start.Add(tt.el)); got != tt.want {
				t.Errorf("line:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestBarRedrawsAtMostEveryInterval(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0), step: 10 * time.Millisecond}
	var out bytes.Buffer
	b := newBar(&out, "x", 100<<20, clock.now)
	data := bytes.Repeat([]byte{1}, 100<<10)
	r := b.Reader(bytes.NewReader(data))
	buf := make([]byte, 1<<10)
	for {
		if _, err := r.Read(buf); err == io.EOF {
			break
		}
	}
	b.Finish()
	b.Finish()
	draws := strings.Count(out.String(), "\r")
	// 100 reads (and an EOF read) 10ms apart: a redraw every 100ms, plus
	// Finish's.
	if draws < 9 || draws > 13 {
		t.Errorf("%d redraws, want about 11:\n%q", draws, out.String())
	}
	// 100 KiB in 1.02s of fake time.
	if !strings.HasSuffix(out.String(), "100.0 KiB / 100.0 MiB    0%  98.0 KiB/s\x1b[K\n") {
		t.Errorf("last draw: %q", out.String()[strings.LastIndex(out.String(), "\r"):])
	}
}

func TestWriterCounts(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	var sink bytes.Buffer
	b := newBar(io.Discard, "x", 10, clock.now)
	w := b.Writer(&sink)
	w.Write([]byte("hello"))
	w.Write([]byte("world"))
	if b.n != 10 || sink.String() != "helloworld" {
		t.Errorf("counted %d, wrote %q; want 10 and helloworld", b.n, sink.String())
	}
}
