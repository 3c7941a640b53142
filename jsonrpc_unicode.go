package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// unicodeJSON reports whether every string in the valid JSON raw is valid
// Unicode: UTF-8, with each \u surrogate escape half of a pair. encoding/json
// turns anything else into U+FFFD, so "\ud800" and "\udfff" would decode alike.
// In valid JSON a backslash only occurs in a string: no string tracking needed.
func unicodeJSON(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; ; {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 || i+j+1 >= len(raw) {
			return true
		}
		i += j
		if raw[i+1] != 'u' {
			i += 2
			continue
		}
		r := escapedUnit(raw, i) // in valid JSON four hex digits follow
		i += 6
		if utf16.IsSurrogate(r) {
			// Only a high half followed by an escaped low half decodes.
			if utf16.DecodeRune(r, escapedUnit(raw, i)) == utf8.RuneError {
				return false
			}
			i += 6
		}
	}
}

// escapedUnit decodes the UTF-16 code unit of the \uXXXX escape at raw[i:], 0 without one.
func escapedUnit(raw []byte, i int) rune {
	if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
		return 0
	}
	r, _ := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16) // 0 for a bad digit
	return rune(r)
}

// rawJSON is valid JSON text written as it came, such as a request id.
type rawJSON json.RawMessage

// writePyJSON writes r as it came, but a string literal re-escaped as the
// original's ensure_ascii json.dumps would, one character or escaped UTF-16
// unit at a time: "\u0041" is echoed "A", a lone surrogate in an id as sent,
// a non-UTF-8 byte as \udcXX.
func (r rawJSON) writePyJSON(b *strings.Builder, _ jsonStyle) {
	if len(r) < 2 || r[0] != '"' {
		b.Write(r)
		return
	}
	b.Grow(len(r))
	b.WriteByte('"')
	body := r[1 : len(r)-1]
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case c == '\\' && i+1 < len(body):
			switch e := body[i+1]; e {
			case 'u':
				writePyRune(b, escapedUnit(body, i)) // in valid JSON four hex digits follow
				i += 6
				continue
			case '/':
				b.WriteByte('/')
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
			i += 2
		default:
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				r = 0xdc00 | rune(c)
			}
			writePyRune(b, r)
			i += size
		}
	}
	b.WriteByte('"')
}

// writePyRune writes r as ensure_ascii json.dumps does inside a string.
func writePyRune(b *strings.Builder, r rune) {
	switch short, ok := shortEscapes[r]; {
	case r < utf8.RuneSelf && plainASCII[r]:
		b.WriteByte(byte(r))
	case ok:
		b.WriteString(short)
	default:
		writeU(b, r)
	}
}

// splitObject returns the members of the valid JSON raw as slices of raw (not
// to be reused), where json.Unmarshal would copy a 200 MB send's text; ok is
// false for a non-object. A repeated key keeps its last value.
func splitObject(raw []byte) (members map[string]json.RawMessage, ok bool) {
	members = map[string]json.RawMessage{}
	if !eachMember(raw, func(key string, value json.RawMessage) { members[key] = value }) {
		return nil, false
	}
	return members, true
}

// eachMember calls member with each key (decoded) and value (a slice of raw)
// of the valid JSON object raw, in order, and reports whether raw is one.
func eachMember(raw []byte, member func(key string, value json.RawMessage)) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	for i = skipSpace(raw, i+1); i < len(raw) && raw[i] != '}'; {
		end := skipValue(raw, i)
		key, _ := decodeJSONString(raw[i:end])
		i = skipSpace(raw, skipSpace(raw, end)+1) // past the colon
		end = skipValue(raw, i)
		member(key, raw[i:end:end])
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return true
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the valid JSON value starting at i.
func skipValue(raw []byte, i int) int {
	depth := 0
	for ; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			i = stringEnd(raw, i) - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object or array
			}
			depth--
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
			continue
		default:
			continue
		}
		if depth == 0 {
			return i + 1
		}
	}
	return i
}

// stringEnd returns the index just past the string literal starting at i.
func stringEnd(raw []byte, i int) int {
	for i++; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// decodeJSONString decodes a valid JSON string literal with one allocation
// (json.Unmarshal makes two); text that is not valid Unicode takes its path.
func decodeJSONString(lit []byte) (s string, ok bool) {
	if len(lit) < 2 || lit[0] != '"' {
		return "", false
	}
	body := lit[1 : len(lit)-1]
	if !unicodeJSON(lit) {
		ok = json.Unmarshal(lit, &s) == nil // before s is read: a return's operands have no order
		return s, ok
	}
	var b strings.Builder
	b.Grow(len(body))
	for len(body) > 0 {
		j := bytes.IndexByte(body, '\\')
		if j < 0 {
			b.Write(body)
			break
		}
		b.Write(body[:j])
		body = body[j:]
		n := 2
		if body[1] == 'u' {
			r := escapedUnit(body, 0)
			n = 6
			if utf16.IsSurrogate(r) {
				r, n = utf16.DecodeRune(r, escapedUnit(body, 6)), 12
			}
			b.WriteRune(r)
		} else if k := strings.IndexByte(`bfnrt`, body[1]); k >= 0 {
			b.WriteByte("\b\f\n\r\t"[k])
		} else {
			b.WriteByte(body[1]) // " \ /
		}
		body = body[n:]
	}
	return b.String(), true
}
