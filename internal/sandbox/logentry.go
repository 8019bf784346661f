package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds on one entry and on a page of them.
const (
	// maxLogValue is the most bytes a message, level or field value
	// keeps; a longer one is cut and says how much was cut.
	maxLogValue = 8 << 10
	// maxLogKey is the most bytes a field's name keeps.
	maxLogKey = 256
	// maxLogFields is the most fields an entry keeps. Past it the entry
	// gets TruncatedField, which counts those left out.
	maxLogFields = 32
	// maxLogPage bounds the entries of one page by entrySize. envd's own
	// entries take well under 1 KiB each: MaxLogLimit of them fit.
	maxLogPage = 16 << 20
)

// TruncatedField is the field of an entry whose line had more than
// maxLogFields fields, or was longer than maxLogLine; its value says
// what was left out.
const TruncatedField = "hutch.truncated"

// entrySize approximates what e takes in memory and in a response: its
// strings as JSON writes them, and a fixed cost per entry and per field
// for the structures that hold them.
func entrySize(e LogEntry) int {
	n := 128 + jsonSize(e.Level) + jsonSize(e.Message)
	for k, v := range e.Fields {
		n += 64 + jsonSize(k) + jsonSize(v)
	}
	return n
}

// jsonSize is the length of s as encoding/json writes it in a string,
// quotes left out: control characters, <, > and & take six bytes
// (\u003c), quotes and backslashes two, U+2028 and U+2029 six.
func jsonSize(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '<', c == '>', c == '&':
			n += 6
		case c == '"', c == '\\':
			n += 2
		case c == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xa8:
			n += 6
			i += 2
		default:
			n++
		}
	}
	return n
}

// logLine is what a first look at a line found.
type logLine struct {
	// blank: nothing but white space, not an entry.
	blank bool
	// object: a JSON object, else the line is text. Of a line longer
	// than maxLogLine, of which only the start was read, the members
	// whole in that start are read as an object's (slog writes the
	// time, level and message first).
	object bool
	// time is the line's own time, zero if it has none.
	time time.Time
}

// scanLine looks at a line of length n of which line holds the start (all
// of it when n <= maxLogLine): whether it is an entry, and its time. It
// decodes nothing else and allocates nothing, whatever the line, so that
// lines outside the page cost little.
func scanLine(line []byte, n int) logLine {
	i := skipSpace(line, 0)
	switch {
	case i == len(line) && n == len(line):
		return logLine{blank: true}
	case i == len(line) || line[i] != '{':
		return logLine{}
	}
	var at []byte // the last "time" member's value
	members := 0
	whole := walkObject(line, func(key, value []byte, whole bool) {
		members++
		if whole && (bytes.Equal(key, []byte(`"time"`)) || (bytes.IndexByte(key, '\\') >= 0 && jsonString(key) == "time")) {
			at = value
		}
	})
	if !whole && (n == len(line) || members == 0) {
		return logLine{}
	}
	l := logLine{object: true}
	if len(at) > 0 && at[0] == '"' {
		l.time, _ = time.Parse(time.RFC3339Nano, jsonString(at))
	}
	return l
}

// entry decodes a line (see scanLine) into an entry of time t. A line
// that is not a JSON object is an error entry whose message is the line.
// Strings are cut at maxLogValue (maxLogKey for names), fields at
// maxLogFields; TruncatedField says what else was left out.
func (l logLine) entry(line []byte, n int, t time.Time) LogEntry {
	if !l.object {
		return LogEntry{Time: t, Level: "error", Message: cut(string(line[:min(len(line), maxLogValue+utf8.UTFMax)]), maxLogValue, n)}
	}
	e := LogEntry{Time: t, Level: "info", Fields: map[string]string{}}
	dropped := 0
	walkObject(line, func(key, value []byte, whole bool) {
		mark := ""
		if !whole {
			value, mark = partialString(value), "…[line cut]"
		}
		// Names are compared and looked up as bytes: a line may have
		// thousands of fields, of which only a few are kept.
		name := key[1 : len(key)-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			name = []byte(jsonString(key))
		}
		switch string(name) {
		case "time":
		case "level":
			e.Level = strings.ToLower(jsonValue(value)) + mark
		case "msg":
			e.Message = jsonValue(value) + mark
		default:
			if len(e.Fields) >= maxLogFields {
				if _, ok := e.Fields[string(name)]; !ok {
					dropped++
					return
				}
			}
			e.Fields[cut(string(name), maxLogKey, len(name))] = jsonValue(value) + mark
		}
	})
	var notes []string
	if dropped > 0 {
		notes = append(notes, fmt.Sprintf("%d more fields left out", dropped))
	}
	if n > len(line) {
		notes = append(notes, fmt.Sprintf("a line of %d bytes, read up to the last member whole in its first %d", n, len(line)))
	}
	if len(notes) > 0 {
		e.Fields[TruncatedField] = strings.Join(notes, "; ")
	}
	return e
}

// cut returns s, the start of a text of total bytes, as an entry keeps
// it: at most its first max bytes (ending at a character's start), then,
// if that is not all of the text, a mark of how many bytes were cut.
// Bytes that are not UTF-8 become U+FFFD, as encoding/json would make
// them.
func cut(s string, max, total int) string {
	i := len(s)
	if i > max {
		i = max
		for j := 1; j < utf8.UTFMax && i > 0 && !utf8.RuneStart(s[i]); j++ {
			i--
		}
	}
	out := strings.ToValidUTF8(s[:i], "\uFFFD")
	if total > i {
		out += fmt.Sprintf("…[%d bytes cut]", total-i)
	}
	return out
}

// jsonValue is a member's value as an entry keeps it: a string's text,
// or any other value's JSON, compacted; cut at maxLogValue.
func jsonValue(raw []byte) string {
	if raw[0] == '"' {
		s := jsonString(raw)
		return cut(s, maxLogValue, len(s))
	}
	if raw[0] == '{' || raw[0] == '[' {
		var b bytes.Buffer
		json.Compact(&b, raw)
		raw = b.Bytes()
	}
	return cut(string(raw[:min(len(raw), maxLogValue+utf8.UTFMax)]), maxLogValue, len(raw))
}

// partialString makes the start of a JSON string (its opening quote and
// what follows, up to where a line was cut) a whole JSON string: what it
// holds, without an escape the cut split.
func partialString(raw []byte) []byte {
	for drop := 0; drop < 6 && drop < len(raw); drop++ {
		s := append(raw[:len(raw)-drop:len(raw)-drop], '"')
		if json.Valid(s) {
			return s
		}
	}
	return []byte(`""`)
}

// jsonString decodes a valid JSON string (cut, if need be, leaves out
// bytes that are not UTF-8).
func jsonString(raw []byte) string {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner)
	}
	var s string
	json.Unmarshal(raw, &s)
	return s
}

// maxJSONDepth is encoding/json's limit on nesting.
const maxJSONDepth = 10000

// walkObject reads line as a JSON object (with white space around it),
// calling f with the name (a JSON string, quoted) and the value of each
// member in order, and reports whether the line is one. It accepts what
// json.Valid does but allocates nothing, also for lines that are not
// JSON, where json.Valid makes an error. f may have been called for some
// members of a line that turns out not to be an object. When the line
// ends inside a string value, f gets the member with the value as far as
// it goes, and whole false: the line may be the start of a longer one.
func walkObject(line []byte, f func(key, value []byte, whole bool)) bool {
	s := jsonScan{b: line, i: skipSpace(line, 0)}
	if !s.next('{') {
		return false
	}
	s.depth = 1
	if s.skip(); !s.next('}') {
		for {
			s.skip()
			k := s.i
			if !s.str() {
				return false
			}
			key := line[k:s.i]
			if s.skip(); !s.next(':') {
				return false
			}
			s.skip()
			v := s.i
			if !s.value() {
				if s.i == len(line) && v < len(line) && line[v] == '"' {
					f(key, line[v:], false)
				}
				return false
			}
			f(key, line[v:s.i], true)
			if s.skip(); s.next(',') {
				continue
			}
			if s.next('}') {
				break
			}
			return false
		}
	}
	s.skip()
	return s.i == len(line)
}

// jsonScan reads JSON from b at i.
type jsonScan struct {
	b     []byte
	i     int
	depth int // of arrays and objects around i
}

// next steps over c if it comes next.
func (s *jsonScan) next(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// skip steps over white space.
func (s *jsonScan) skip() { s.i = skipSpace(s.b, s.i) }

// value steps over a JSON value, or reports that none comes next.
func (s *jsonScan) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.str()
	case c == '{' || c == '[':
		if s.depth++; s.depth > maxJSONDepth {
			return false
		}
		end := byte(']')
		if c == '{' {
			end = '}'
		}
		s.i++
		if s.skip(); s.next(end) {
			s.depth--
			return true
		}
		for {
			s.skip()
			if c == '{' {
				if !s.str() {
					return false
				}
				if s.skip(); !s.next(':') {
					return false
				}
				s.skip()
			}
			if !s.value() {
				return false
			}
			if s.skip(); s.next(',') {
				continue
			}
			if s.next(end) {
				s.depth--
				return true
			}
			return false
		}
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	for _, word := range []string{"true", "false", "null"} {
		if string(s.b[s.i:min(len(s.b), s.i+len(word))]) == word {
			s.i += len(word)
			return true
		}
	}
	return false
}

// str steps over a JSON string.
func (s *jsonScan) str() bool {
	if !s.next('"') {
		return false
	}
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.i++
			if s.i >= len(s.b) {
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if s.i+4 >= len(s.b) {
					s.i = len(s.b) // the end came first
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				s.i += 4
			default:
				return false
			}
		}
	}
	return false
}

// number steps over a JSON number.
func (s *jsonScan) number() bool {
	s.next('-')
	if !s.next('0') && !s.digits() {
		return false
	}
	if s.next('.') && !s.digits() {
		return false
	}
	if s.next('e') || s.next('E') {
		if !s.next('+') {
			s.next('-')
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits steps over one or more decimal digits.
func (s *jsonScan) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// skipSpace returns the index of the first byte of b from i on that is
// not JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
