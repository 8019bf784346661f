package e2bapi

import (
	"encoding/base64"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Listing defaults and bounds (spec §2.6).
const (
	// DefaultListLimit is the page size when limit is absent.
	DefaultListLimit = 100
	// MaxListLimit is the largest page; larger limits are clamped to it.
	MaxListLimit = 100
	// OrderAsc lists oldest first.
	OrderAsc = "asc"
	// OrderDesc lists newest first (the default).
	OrderDesc = "desc"
)

// ListQuery is the parsed query of GET /v2/sandboxes. The zero value is not
// meaningful; get one from [ParseListQuery] or [ParseLegacyListQuery].
type ListQuery struct {
	// Metadata filters by exact key=value matches, all of which must hold.
	// nil means no filter.
	Metadata map[string]string
	// States holds [StateRunning] and/or [StatePaused], without duplicates,
	// in the order given; never empty.
	States []string
	// StartedAfter, if not zero, keeps sandboxes started at or after it
	// (UTC).
	StartedAfter time.Time
	// Template, if not empty, is a template ID or alias (no tag).
	Template string
	// Order is [OrderAsc] or [OrderDesc], by start time over the whole set.
	Order string
	// Limit is the page size, 1..[MaxListLimit]; 0 (legacy listing only)
	// means no pagination.
	Limit int
	// NextToken is the opaque cursor from the previous X-Next-Token, or
	// empty for the first page. Decode it with [DecodeCursor].
	NextToken string
}

// ParseListQuery parses the query of GET /v2/sandboxes as the SDKs send it:
//
//   - metadata: the doubly encoded k=v&k=v string, decoded as in §2.6 (see
//     [ParseMetadataFilter]); repeated parameters are merged;
//   - state: comma-joined (the comma possibly percent-encoded), or
//     repeated; each value running or paused; default both;
//   - startedAfter: RFC 3339 / ISO 8601, with or without fractional seconds
//     and with Z or an offset (a "+" turned into a space by query decoding
//     is tolerated), or a bare date;
//   - template: passed through;
//   - order: asc or desc, default desc;
//   - limit: an integer, default 100, clamped to 1..100;
//   - nextToken: passed through.
//
// Unknown parameters are ignored. Every error is a 400 [*StatusError]
// naming the parameter.
func ParseListQuery(q url.Values) (ListQuery, error) {
	lq := ListQuery{Order: OrderDesc, Limit: DefaultListLimit}
	var err error
	if lq.Metadata, err = metadataParams(q); err != nil {
		return ListQuery{}, err
	}
	if lq.States, err = parseStates(q["state"]); err != nil {
		return ListQuery{}, err
	}
	if s := q.Get("startedAfter"); s != "" {
		if lq.StartedAfter, err = parseISOTime(s); err != nil {
			return ListQuery{}, BadRequestf("startedAfter: %q is not an ISO 8601 date-time", s)
		}
	}
	lq.Template = q.Get("template")
	switch o := q.Get("order"); o {
	case "":
	case OrderAsc, OrderDesc:
		lq.Order = o
	default:
		return ListQuery{}, BadRequestf("order: must be %q or %q, got %q", OrderAsc, OrderDesc, o)
	}
	if s := q.Get("limit"); s != "" {
		if lq.Limit, err = parseLimit(s); err != nil {
			return ListQuery{}, err
		}
	}
	lq.NextToken = q.Get("nextToken")
	return lq, nil
}

// ParseLegacyListQuery parses the query of the legacy GET /sandboxes, which
// lists running sandboxes without pagination and knows only the metadata
// filter (decoded as in [ParseListQuery]). The result has States
// [running], Order desc and Limit 0 (everything).
func ParseLegacyListQuery(q url.Values) (ListQuery, error) {
	md, err := metadataParams(q)
	if err != nil {
		return ListQuery{}, err
	}
	return ListQuery{Metadata: md, States: []string{StateRunning}, Order: OrderDesc}, nil
}

func metadataParams(q url.Values) (map[string]string, error) {
	var md map[string]string
	for _, v := range q["metadata"] {
		m, err := ParseMetadataFilter(v)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			if md == nil {
				md = make(map[string]string, len(m))
			}
			md[k] = v
		}
	}
	return md, nil
}

// ParseMetadataFilter decodes one metadata parameter value, already through
// the normal query decoding (step 1 of §2.6), into a key/value map:
//
//  2. URL-decode the whole string once more;
//  3. split it on '&'; each piece must contain exactly one '=';
//  4. URL-decode each key and value separately.
//
// The observed wire value suite=probe&k%2520y=v%2526%253D1 gives
// {suite: probe, "k y": "v&=1"}. An empty value gives nil. Keys must not be
// empty; a repeated key keeps its last value. Errors are 400s.
func ParseMetadataFilter(value string) (map[string]string, error) {
	if value == "" {
		return nil, nil
	}
	s, err := url.QueryUnescape(value)
	if err != nil {
		return nil, BadRequest("metadata: invalid percent-encoding")
	}
	md := make(map[string]string)
	for _, piece := range strings.Split(s, "&") {
		if strings.Count(piece, "=") != 1 {
			return nil, BadRequestf("metadata: %q is not a key=value pair", piece)
		}
		rawK, rawV, _ := strings.Cut(piece, "=")
		k, err := url.QueryUnescape(rawK)
		if err != nil {
			return nil, BadRequestf("metadata: key %q has invalid percent-encoding", rawK)
		}
		v, err := url.QueryUnescape(rawV)
		if err != nil {
			return nil, BadRequestf("metadata: value of %q has invalid percent-encoding", k)
		}
		if k == "" {
			return nil, BadRequest("metadata: empty key")
		}
		md[k] = v
	}
	return md, nil
}

// EncodeMetadataFilter is the inverse of [ParseMetadataFilter], computed
// as the JS SDK does before the final query encoding: each key and value
// escaped like encodeURIComponent, joined as k=v&k=v, and the '%' signs
// escaped again. Put the result in a url.Values under "metadata"; its
// Encode adds the last layer. Keys are emitted in sorted order. It exists
// for tests and Go clients.
func EncodeMetadataFilter(md map[string]string) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(uriComponent(k)))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(uriComponent(md[k])))
	}
	return b.String()
}

// uriComponent escapes s like JavaScript's encodeURIComponent, except that
// it also escapes !*'( and ), which decodes the same.
func uriComponent(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

func parseStates(params []string) ([]string, error) {
	var states []string
	seen := map[string]bool{}
	for _, p := range params {
		for _, s := range strings.Split(p, ",") {
			s = strings.TrimSpace(s)
			switch s {
			case "":
				continue
			case StateRunning, StatePaused:
			default:
				return nil, BadRequestf("state: %q is not %q or %q", s, StateRunning, StatePaused)
			}
			if !seen[s] {
				seen[s] = true
				states = append(states, s)
			}
		}
	}
	if len(states) == 0 {
		return []string{StateRunning, StatePaused}, nil
	}
	return states, nil
}

// isoLayouts are the ISO 8601 forms startedAfter accepts, most common
// (Date.toISOString()) first. RFC3339Nano also parses times without
// fractional seconds.
var isoLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999Z0700",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02T15:04Z07:00",
	"2006-01-02",
}

func parseISOTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	try := func(s string) (time.Time, error) {
		var firstErr error
		for _, l := range isoLayouts {
			t, err := time.Parse(l, s)
			if err == nil {
				return t.UTC(), nil
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		return time.Time{}, firstErr
	}
	t, err := try(s)
	if err != nil && strings.Contains(s, " ") {
		// An unencoded "+01:00" offset arrives as " 01:00".
		if t2, err2 := try(strings.Replace(s, " ", "+", 1)); err2 == nil {
			return t2, nil
		}
	}
	return t, err
}

func parseLimit(s string) (int, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if !errors.As(err, &ne) || ne.Err != strconv.ErrRange {
			return 0, BadRequestf("limit: %q is not an integer", s)
		}
		// Out of int64 range: clamp by sign like any other number.
		if strings.HasPrefix(strings.TrimSpace(s), "-") {
			n = 1
		} else {
			n = MaxListLimit
		}
	}
	return int(min(max(n, 1), MaxListLimit)), nil
}

// Cursor is what a Hutch next token encodes: the position after which the
// next page starts, in the listing's order.
type Cursor struct {
	// StartedAt is the start time of the last sandbox of the previous page.
	StartedAt time.Time
	// SandboxID breaks ties between equal start times.
	SandboxID string
}

// cursorSep separates the cursor's fields, as in the reference server's
// token (base64url of <RFC3339Nano startedAt>__<sandboxID>). Sandbox IDs are
// [a-z0-9]+ and cannot contain it.
const cursorSep = "__"

// EncodeCursor returns the opaque X-Next-Token for c: unpadded base64url of
// "<RFC 3339 startedAt>__<sandboxID>".
func EncodeCursor(c Cursor) string {
	return base64.RawURLEncoding.EncodeToString(
		[]byte(c.StartedAt.UTC().Format(time.RFC3339Nano) + cursorSep + c.SandboxID))
}

// DecodeCursor parses a nextToken made by [EncodeCursor] (padded base64url
// is accepted too). A malformed token is the spec's 400 "Invalid next
// token".
func DecodeCursor(token string) (Cursor, error) {
	bad := BadRequest("Invalid next token")
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(token, "="))
	if err != nil {
		return Cursor{}, bad
	}
	ts, id, ok := strings.Cut(string(raw), cursorSep)
	if !ok || id == "" || strings.Contains(id, cursorSep) {
		return Cursor{}, bad
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Cursor{}, bad
	}
	return Cursor{StartedAt: t.UTC(), SandboxID: id}, nil
}
