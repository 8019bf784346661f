package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// logBase is the time of the test logs' first entry; entry i is i
// milliseconds later.
var logBase = time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)

// at is the time of test entry i.
func at(i int) time.Time { return logBase.Add(time.Duration(i) * time.Millisecond) }

// slogLine is a line as envd's slog writes it, at(i), message msg.
func slogLine(i int, msg string) string {
	return fmt.Sprintf(`{"time":%q,"level":"INFO","msg":%q,"n":%d}`+"\n", at(i).Format(time.RFC3339Nano), msg, i)
}

// got is what the tests compare of an entry.
type got struct {
	Msg  string
	Time time.Time
}

func messages(entries []LogEntry) []got {
	out := []got{}
	for _, e := range entries {
		out = append(out, got{e.Message, e.Time})
	}
	return out
}

// TestReadLog: which entries a query returns, in which order, with which
// times, whatever the lines around them.
func TestReadLog(t *testing.T) {
	three := slogLine(0, "a") + slogLine(1, "b") + slogLine(2, "c")
	// A Go panic between entries: its lines take the time before them.
	panicked := slogLine(0, "a") + "panic: boom\n\ngoroutine 1 [running]:\n" + slogLine(5, "b")
	// What a sandbox's root can write (review findings A6 and C3).
	long := strings.Repeat("x", maxLogLine+1)
	hugeHead := `{"time":"` + at(1).Format(time.RFC3339Nano) + `","msg":"`
	huge := hugeHead + strings.Repeat("y", 2<<20) + `"}`
	cutMsg := func(s string) string { return s[:maxLogValue] + fmt.Sprintf("…[%d bytes cut]", len(s)-maxLogValue) }
	// Of a long JSON line, the members in its first maxLogValue bytes.
	hugeMsg := huge[len(hugeHead):maxLogValue] + "…[line cut]"
	tests := []struct {
		name string
		log  string
		q    LogQuery
		want []got
	}{
		{"empty", "", LogQuery{}, []got{}},
		{"empty backward", "", LogQuery{Backward: true}, []got{}},
		{"all", three, LogQuery{}, []got{{"a", at(0)}, {"b", at(1)}, {"c", at(2)}}},
		{"limit", three, LogQuery{Limit: 2}, []got{{"a", at(0)}, {"b", at(1)}}},
		{"cursor", three, LogQuery{Cursor: at(1)}, []got{{"b", at(1)}, {"c", at(2)}}},
		{"backward", three, LogQuery{Backward: true}, []got{{"c", at(2)}, {"b", at(1)}, {"a", at(0)}}},
		{"backward limit 1", three, LogQuery{Backward: true, Limit: 1}, []got{{"c", at(2)}}},
		{"backward cursor", three, LogQuery{Backward: true, Cursor: at(1)}, []got{{"b", at(1)}, {"a", at(0)}}},
		{"no final line break", strings.TrimSuffix(three, "\n"), LogQuery{Backward: true, Limit: 1}, []got{{"c", at(2)}}},
		{"blank lines and CRLF", "\n\n" + strings.ReplaceAll(three, "\n", "\r\n\n") + "  \n", LogQuery{}, []got{{"a", at(0)}, {"b", at(1)}, {"c", at(2)}}},
		{"text lines take the time before them", panicked, LogQuery{},
			[]got{{"a", at(0)}, {"panic: boom", at(0)}, {"goroutine 1 [running]:", at(0)}, {"b", at(5)}}},
		{"backward, text lines take the time before them", panicked, LogQuery{Backward: true},
			[]got{{"b", at(5)}, {"goroutine 1 [running]:", at(0)}, {"panic: boom", at(0)}, {"a", at(0)}}},
		{"backward, text lines before the cursor", panicked, LogQuery{Backward: true, Cursor: at(3)},
			[]got{{"goroutine 1 [running]:", at(0)}, {"panic: boom", at(0)}, {"a", at(0)}}},
		{"backward, text lines after the cursor", slogLine(0, "a") + slogLine(4, "b") + "text\n" + slogLine(5, "c"), LogQuery{Backward: true, Cursor: at(3)},
			[]got{{"a", at(0)}}},
		{"backward limit, text lines", panicked + "tail\n", LogQuery{Backward: true, Limit: 2},
			[]got{{"tail", at(5)}, {"b", at(5)}}},
		{"backward limit, text lines after the cursor", slogLine(0, "a") + slogLine(1, "b") + slogLine(4, "c") + "t1\nt2\nt3\n", LogQuery{Backward: true, Limit: 2, Cursor: at(3)},
			[]got{{"b", at(1)}, {"a", at(0)}}},
		{"text before any time", "first\n" + three, LogQuery{Backward: true, Cursor: at(0)},
			[]got{{"a", at(0)}, {"first", time.Time{}}}},
		{"forward cursor drops text of before", "first\n" + three, LogQuery{Cursor: at(0)},
			[]got{{"a", at(0)}, {"b", at(1)}, {"c", at(2)}}},
		{"a line longer than maxLogLine", slogLine(0, "a") + long + "\n" + slogLine(2, "c"), LogQuery{},
			[]got{{"a", at(0)}, {cutMsg(long), at(0)}, {"c", at(2)}}},
		{"backward, a line longer than maxLogLine", slogLine(0, "a") + long + "\n" + slogLine(2, "c"), LogQuery{Backward: true},
			[]got{{"c", at(2)}, {cutMsg(long), at(0)}, {"a", at(0)}}},
		{"a 2 MiB entry", slogLine(0, "a") + huge + "\n" + slogLine(2, "c"), LogQuery{},
			[]got{{"a", at(0)}, {hugeMsg, at(1)}, {"c", at(2)}}},
		{"backward, a 2 MiB entry", slogLine(0, "a") + huge + "\n" + slogLine(2, "c"), LogQuery{Backward: true},
			[]got{{"c", at(2)}, {hugeMsg, at(1)}, {"a", at(0)}}},
		{"backward, a 2 MiB line last without a line break", slogLine(0, "a") + huge, LogQuery{Backward: true},
			[]got{{hugeMsg, at(1)}, {"a", at(0)}}},
		{"a long line cut inside an escape", slogLine(0, "a") + hugeHead + strings.Repeat("y", maxLogValue-len(hugeHead)-3) + `\u00e9` + strings.Repeat("y", maxLogLine) + "\"}\n", LogQuery{},
			[]got{{"a", at(0)}, {strings.Repeat("y", maxLogValue-len(hugeHead)-3) + "…[line cut]", at(1)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, err := readLog(strings.NewReader(tt.log), int64(len(tt.log)), tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, messages(entries)); diff != "" {
				t.Errorf("readLog(%+v) (-want +got):\n%s", tt.q, diff)
			}
		})
	}
}

// TestLogEntry: what an entry keeps of a line, and its bounds.
func TestLogEntry(t *testing.T) {
	many := `{"msg":"m"`
	for i := range maxLogFields + 10 {
		many += fmt.Sprintf(`,"f%02d":%d`, i, i)
	}
	many += `,"f00":"again","level":"WARN"}`
	manyFields := map[string]string{TruncatedField: "10 more fields left out"}
	for i := range maxLogFields {
		manyFields[fmt.Sprintf("f%02d", i)] = fmt.Sprint(i)
	}
	manyFields["f00"] = "again"
	longValue := strings.Repeat("é", maxLogValue) // two bytes each
	longKey := strings.Repeat("k", maxLogKey+1)
	tests := []struct {
		name string
		line string
		want LogEntry
	}{
		{"slog", `{"time":"2026-11-23T01:02:03.5Z","level":"WARN","msg":"hi","pid":42,"tag":"x","ok":true,"o":{"a": [1, 2]}}`,
			LogEntry{Time: time.Date(2026, 11, 23, 1, 2, 3, 5e8, time.UTC), Level: "warn", Message: "hi",
				Fields: map[string]string{"pid": "42", "tag": "x", "ok": "true", "o": `{"a":[1,2]}`}}},
		{"text", "panic: boom\r", LogEntry{Level: "error", Message: "panic: boom\r"}},
		{"not an object", `[1,2]`, LogEntry{Level: "error", Message: "[1,2]"}},
		{"no time", `{"msg":"no time"}`, LogEntry{Level: "info", Message: "no time", Fields: map[string]string{}}},
		{"escaped names", `{"\u0074ime":"2026-11-23T01:02:03Z","m\u0073g":"esc","a\"b":"\u001b]0;x\u0007"}`,
			LogEntry{Time: time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC), Level: "info", Message: "esc", Fields: map[string]string{`a"b`: "\x1b]0;x\a"}}},
		{"a later time wins", `{"time":"2026-11-23T01:02:03Z","time":5,"msg":"t"}`, LogEntry{Level: "info", Message: "t", Fields: map[string]string{}}},
		{"not UTF-8", "{\"msg\":\"a\xffb\"}", LogEntry{Level: "info", Message: "a\uFFFDb", Fields: map[string]string{}}},
		{"text not UTF-8", "a\xffb", LogEntry{Level: "error", Message: "a\uFFFDb"}},
		{"too many fields", many, LogEntry{Level: "warn", Message: "m", Fields: manyFields}},
		{"long value", `{"msg":"` + longValue + `","v":"` + longValue + `"}`, LogEntry{Level: "info",
			Message: longValue[:maxLogValue] + fmt.Sprintf("…[%d bytes cut]", len(longValue)-maxLogValue),
			Fields:  map[string]string{"v": longValue[:maxLogValue] + fmt.Sprintf("…[%d bytes cut]", len(longValue)-maxLogValue)}}},
		{"long value cut inside a character", `{"msg":"a` + longValue + `"}`, LogEntry{Level: "info",
			Message: "a" + longValue[:maxLogValue-2] + fmt.Sprintf("…[%d bytes cut]", len(longValue)+1-(maxLogValue-1)), Fields: map[string]string{}}},
		{"long name", `{"` + longKey + `":1}`, LogEntry{Level: "info", Fields: map[string]string{longKey[:maxLogKey] + "…[1 bytes cut]": "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := []byte(tt.line)
			l := scanLine(line, len(line))
			got := l.entry(line, len(line), l.time)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("entry of %.80q (-want +got):\n%s", tt.line, diff)
			}
		})
	}
}

// TestLogEntryLongLine: of a JSON line longer than maxLogLine, of which
// only the start is read, an entry keeps the members whole in that start
// and the string it was cut in, and says so.
func TestLogEntryLongLine(t *testing.T) {
	head := `{"time":"2026-11-23T01:02:03Z","level":"INFO","msg":"process started","pid":7,"tag":"`
	line := head + strings.Repeat("t", maxLogLine) + `"}`
	read := []byte(line[:maxLogValue])
	l := scanLine(read, len(line))
	want := LogEntry{Time: time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC), Level: "info", Message: "process started",
		Fields: map[string]string{"pid": "7", "tag": strings.Repeat("t", maxLogValue-len(head)) + "…[line cut]",
			TruncatedField: fmt.Sprintf("a line of %d bytes, read up to the last member whole in its first %d", len(line), maxLogValue)}}
	if diff := cmp.Diff(want, l.entry(read, len(line), l.time)); diff != "" {
		t.Errorf("entry of a long line (-want +got):\n%s", diff)
	}
	// Text, or nothing whole: the start of the line is the message.
	for _, s := range []string{strings.Repeat("x", maxLogLine+1), `{"msg` + strings.Repeat("x", maxLogLine)} {
		read := []byte(s[:maxLogValue])
		l := scanLine(read, len(s))
		if e := l.entry(read, len(s), time.Time{}); e.Level != "error" || e.Message != s[:maxLogValue]+fmt.Sprintf("…[%d bytes cut]", len(s)-maxLogValue) {
			t.Errorf("entry of a long line %.20q: %.100v", s, e)
		}
	}
}

// TestLogLines: backward reading finds the lines forward reading does,
// in reverse, whatever their lengths and wherever chunks end.
func TestLogLines(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 30 {
		var b strings.Builder
		for range r.IntN(50) {
			switch n := r.IntN(10); {
			case n == 0:
				b.WriteString("\n")
			case n == 1:
				b.WriteString(strings.Repeat("L", maxLogLine-2+r.IntN(5)) + "\n")
			case n == 2:
				b.WriteString(strings.Repeat("H", logChunk*2+r.IntN(logChunk)) + "\n")
			default:
				fmt.Fprintf(&b, "%d %s\n", round, strings.Repeat("s", r.IntN(3000)))
			}
		}
		log := b.String()
		if r.IntN(2) == 0 {
			log += "no line break"
		}
		type line struct {
			Start string
			N     int
		}
		var fwd, bwd []line
		f := newForwardLines(strings.NewReader(log), int64(len(log)))
		for {
			l, n, err := f.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			fwd = append(fwd, line{string(l), n})
		}
		bl := newBackwardLines(strings.NewReader(log), int64(len(log)))
		for {
			l, n, err := bl.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			bwd = append([]line{{string(l), n}}, bwd...)
		}
		var want []line
		for _, l := range strings.SplitAfter(log, "\n") {
			if l == "" {
				continue
			}
			l = strings.TrimSuffix(l, "\n")
			if len(l) > maxLogLine {
				want = append(want, line{l[:maxLogValue], len(l)})
			} else {
				want = append(want, line{l, len(l)})
			}
		}
		if diff := cmp.Diff(want, fwd); diff != "" {
			t.Fatalf("round %d: forward lines (-want +got):\n%s", round, diff)
		}
		if diff := cmp.Diff(want, bwd); diff != "" {
			t.Fatalf("round %d: backward lines (-want +got):\n%s", round, diff)
		}
	}
}

// TestLogPageBound: a page ends before its entries pass maxLogPage, but
// holds at least one.
func TestLogPageBound(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 3*maxLogPage; i++ {
		b.WriteString(slogLine(i, strings.Repeat("<", maxLogValue)))
	}
	log := b.String()
	for _, q := range []LogQuery{{Limit: MaxLogLimit}, {Limit: MaxLogLimit, Backward: true}} {
		entries, err := readLog(strings.NewReader(log), int64(len(log)), q)
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, e := range entries {
			size += entrySize(e)
		}
		if size > maxLogPage || size+entrySize(entries[0]) <= maxLogPage {
			t.Errorf("%+v: %d entries of %d bytes, want a page filled up to %d", q, len(entries), size, maxLogPage)
		}
	}
}

// hostileLogs are 16 MiB logs a sandbox's root can write to envd's
// standard error (the most the runtime keeps): review finding A6 grew
// hutch serve by 217 MB for one ?direction=backward&limit=1 on the first.
func hostileLogs() map[string][]byte {
	const size = 16 << 20
	fill := func(line func(i int) string) []byte {
		var b bytes.Buffer
		for i := 0; b.Len() < size; i++ {
			b.WriteString(line(i))
		}
		return b.Bytes()[:size]
	}
	fields := strings.Repeat(`"f":1,`, 10000) // 60 KB of fields
	return map[string][]byte{
		"many-field lines": fill(func(i int) string {
			return fmt.Sprintf(`{"time":"%s","level":"INFO","msg":"m%d",%s"x":1}`+"\n", at(i).Format(time.RFC3339Nano), i, fields)
		}),
		"many distinct fields": fill(func(i int) string {
			var b strings.Builder
			fmt.Fprintf(&b, `{"time":"%s","msg":"m%d"`, at(i).Format(time.RFC3339Nano), i)
			for j := range 3000 {
				fmt.Fprintf(&b, `,"f%d":"%d"`, j, j)
			}
			return b.String() + "}\n"
		}),
		"1 MiB lines":      fill(func(i int) string { return strings.Repeat("z", 1<<20) + "\n" }),
		"no line break":    bytes.Repeat([]byte("q"), size),
		"short text lines": fill(func(i int) string { return "<\n" }),
	}
}

// TestReadLogMemory: what reading a page allocates is bounded by the
// page, not by the log (review finding A6). The numbers are logged; run
// with -v to see them.
func TestReadLogMemory(t *testing.T) {
	queries := []struct {
		name  string
		q     LogQuery
		bound uint64 // bytes allocated at most
	}{
		{"backward limit 1", LogQuery{Backward: true, Limit: 1}, 1 << 20},
		{"forward limit 1", LogQuery{Limit: 1}, 1 << 20},
		{"forward, cursor past every entry", LogQuery{Cursor: at(1 << 30)}, 1 << 20},
		{"backward, cursor before every entry", LogQuery{Backward: true, Cursor: logBase.Add(-time.Hour)}, 1 << 20},
		{"forward default limit", LogQuery{}, 3 * maxLogPage},
		{"backward limit 10000", LogQuery{Backward: true, Limit: MaxLogLimit}, 3 * maxLogPage},
	}
	for name, log := range hostileLogs() {
		for _, qq := range queries {
			t.Run(name+"/"+qq.name, func(t *testing.T) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				start := time.Now()
				entries, err := readLog(bytes.NewReader(log), int64(len(log)), qq.q)
				took := time.Since(start)
				runtime.ReadMemStats(&after)
				if err != nil {
					t.Fatal(err)
				}
				alloc := after.TotalAlloc - before.TotalAlloc
				t.Logf("%d entries, %.1f MiB allocated, %v", len(entries), float64(alloc)/(1<<20), took.Round(time.Millisecond))
				if alloc > qq.bound {
					t.Errorf("reading %d entries allocated %d bytes, want at most %d", len(entries), alloc, qq.bound)
				}
			})
		}
	}
}

// BenchmarkReadLogHostile: ?direction=backward&limit=1 and a default
// forward page of the first hostile log.
func BenchmarkReadLogHostile(b *testing.B) {
	log := hostileLogs()["many-field lines"]
	for _, q := range []LogQuery{{Backward: true, Limit: 1}, {}} {
		b.Run(fmt.Sprintf("backward=%v,limit=%d", q.Backward, q.Limit), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := readLog(bytes.NewReader(log), int64(len(log)), q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWalkObject: walkObject takes a line for an object exactly when
// encoding/json does, on JSON and on mutations of it.
func TestWalkObject(t *testing.T) {
	seeds := []string{
		`{}`, ` { } `, `{"a":1}`, `{"a":-0.5e+10,"b":[true,false,null,{"c":"\u00e9\n\"\\\/"}],"d":{}}`,
		`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-}`, `{"a":tru}`, `{"a":truex}`, `{"a" 1}`, `{"a":1,}`,
		`{,}`, `{"a":[1,]}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"` + "\t" + `"}`, `{"a":1}x`, `{"a":1}}`, `[1]`, `"s"`, `1`,
		`{"a":[[[[[]]]]]}`, "{\"a\":\"\xff\xfe\"}", `{"a":1 , "b" : [ 1 , 2 ] }`, `{"a":"b`,
		`{"a":` + strings.Repeat("[", maxJSONDepth-1) + strings.Repeat("]", maxJSONDepth-1) + `}`,
		`{"a":` + strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth) + `}`,
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`{}[]":,-+.eE0123456789 \ntrufalsn\u00`)
	check := func(line string) {
		b := []byte(line)
		members := 0
		got := walkObject(b, func(key, value []byte, whole bool) {
			if whole {
				members++
			}
		})
		want := json.Valid(b) && bytes.TrimSpace(b)[0] == '{'
		if got != want {
			t.Errorf("walkObject(%.100q) = %v, json.Valid says %v", line, got, want)
		}
		if !got {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil || (len(m) > 0) != (members > 0) {
			t.Errorf("walkObject(%q): %d members, json finds %d (%v)", line, members, len(m), err)
		}
	}
	for _, s := range seeds {
		check(s)
		for range 300 {
			b := []byte(s)
			for range 1 + r.IntN(3) {
				switch i := r.IntN(len(b) + 1); r.IntN(3) {
				case 0:
					b = slices.Insert(b, i, alphabet[r.IntN(len(alphabet))])
				case 1:
					if i < len(b) {
						b = slices.Delete(b, i, i+1)
					}
				default:
					if i < len(b) {
						b[i] = alphabet[r.IntN(len(alphabet))]
					}
				}
			}
			if len(bytes.TrimSpace(b)) > 0 {
				check(string(b))
			}
		}
	}
}
