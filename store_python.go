package main

// This file holds the emulations of the Python original that agents or
// other writers can observe (golden_test.go checks them byte for byte), in
// the store layer because stored values are written in these forms. Those
// with one caller stay beside it: rawJSON.writePyJSON (jsonrpc_unicode.go),
// sqliteMessage (store_errors.go),
// parseStringList (store_read.go), pyLower and the URI quoting (routing.go),
// auditRequestID and pyNumber (audit_event.go), and pyFromISOFormat, which
// reads the audit log's and the dashboard's timestamps (audit_rollup.go).

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// object is a JSON object that keeps its keys in insertion order, so results
// render like the original's json.dumps of a dict.
type object []field

// field is one key of an object.
type field struct {
	key   string
	value any
}

// get returns the value of key, or nil when o lacks it.
func (o object) get(key string) any {
	if i := slices.IndexFunc(o, func(f field) bool { return f.key == key }); i >= 0 {
		return o[i].value
	}
	return nil
}

// pyJSONWriter is a value that renders itself in a jsonStyle, as rawJSON
// (jsonrpc_unicode.go) echoes a request id as it came.
type pyJSONWriter interface {
	writePyJSON(b *strings.Builder, st jsonStyle)
}

// stringList is a JSON array of strings; nil renders as [].
type stringList []string

// jsonStyle is one of the json.dumps configurations the original writes
// with. Keys keep their order; callers that need sort_keys sort first.
type jsonStyle struct {
	itemSep, keySep string
	ensureASCII     bool
}

var (
	// pyDumps is json.dumps(v): tool result text, resource text, every
	// line on stdout and the stored mentions and wakeup_targets lists.
	pyDumps = jsonStyle{itemSep: ", ", keySep: ": ", ensureASCII: true}
	// pyCompact is json.dumps(v, separators=(",", ":"), ensure_ascii=False),
	// the audit log's details_json.
	pyCompact = jsonStyle{itemSep: ",", keySep: ":"}
)

// pyJSON encodes v as the original's json.dumps(v) does.
func pyJSON(v any) string { return pyDumps.encode(v) }

// encode returns v as st renders it.
func (st jsonStyle) encode(v any) string {
	var b strings.Builder
	st.writeValue(&b, v)
	return b.String()
}

// writeValue appends v as st renders it; a type it has no case for panics.
func (st jsonStyle) writeValue(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int:
		b.WriteString(strconv.Itoa(v))
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case *int64:
		if v == nil {
			b.WriteString("null")
		} else {
			b.WriteString(strconv.FormatInt(*v, 10))
		}
	case string:
		st.writeString(b, v)
	case *string:
		if v == nil {
			b.WriteString("null")
		} else {
			st.writeString(b, *v)
		}
	case stringList:
		st.writeSeq(b, '[', ']', len(v), func(i int) { st.writeString(b, v[i]) })
	case []any:
		st.writeSeq(b, '[', ']', len(v), func(i int) { st.writeValue(b, v[i]) })
	case object:
		st.writeSeq(b, '{', '}', len(v), func(i int) {
			st.writeString(b, v[i].key)
			b.WriteString(st.keySep)
			st.writeValue(b, v[i].value)
		})
	case pyJSONWriter:
		v.writePyJSON(b, st)
	default:
		panic(fmt.Sprintf("pyJSON: unsupported type %T", v))
	}
}

// writeSeq writes n items, item(i) each, between open and end, separated
// by st.itemSep: a JSON array or object.
func (st jsonStyle) writeSeq(b *strings.Builder, open, end byte, n int, item func(i int)) {
	b.WriteByte(open)
	for i := range n {
		if i > 0 {
			b.WriteString(st.itemSep)
		}
		item(i)
	}
	b.WriteByte(end)
}

// writeString writes s as a JSON string escaped as Python does: quotes,
// backslashes and control characters always, as \uXXXX in lowercase hex
// where there is no short form; with ensureASCII also DEL and every
// non-ASCII character, as surrogate pairs above the BMP.
func (st jsonStyle) writeString(b *strings.Builder, s string) {
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf && plainASCII[c] {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !st.ensureASCII && (c == 0x7f || r >= utf8.RuneSelf && size > 1) {
			i += size
			continue
		}
		b.WriteString(s[start:i])
		switch short, ok := shortEscapes[r]; {
		case ok:
			b.WriteString(short)
		case st.ensureASCII:
			writeU(b, r)
		default:
			b.WriteRune(r) // an invalid byte, written as U+FFFD
		}
		i += size
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// shortEscapes are the characters json.dumps escapes by a letter.
var shortEscapes = map[rune]string{'"': `\"`, '\\': `\\`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\b': `\b`, '\f': `\f`}

// plainASCII marks the bytes that json.dumps writes as they are.
var plainASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// writeU writes r as Python's ensure_ascii json.dumps escapes it: one
// \uXXXX escape in lowercase hex, or a surrogate pair of them above U+FFFF.
func writeU(b *strings.Builder, r rune) {
	if r > 0xffff {
		r1, r2 := utf16.EncodeRune(r)
		writeU(b, r1)
		r = r2
	}
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte("0123456789abcdef"[r>>shift&0xf])
	}
}

// formatTimestamp renders t as the original's datetime.isoformat() does for
// UTC: six fractional digits, or none when the microseconds are zero. Writers
// compare these strings in SQL, so the format is part of the on-disk contract.
func formatTimestamp(t time.Time) string {
	t = t.UTC().Truncate(time.Microsecond)
	if t.Nanosecond() == 0 {
		return t.Format("2006-01-02T15:04:05+00:00")
	}
	return t.Format("2006-01-02T15:04:05.000000+00:00")
}

// isBlank reports whether s is empty after Python's str.strip().
func isBlank(s string) bool { return pyStrip(s) == "" }

// pyStrip trims what Python's str.strip() trims: Go's unicode.IsSpace plus
// the separators U+001C–U+001F.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f })
}
