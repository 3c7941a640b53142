package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// jsonSpan is one parsed JSON value of a settings file with where it lies
// in the text, so that `hooks install` can change one array and leave
// every other byte (comments, order, spacing) as the user wrote it.
type jsonSpan struct {
	kind       byte // '{', '[', '"', or 'v' for numbers and literals
	start, end int  // the value's bytes are text[start:end]
	depth      int  // nesting level; the root is 0
	str        string
	keys       []*jsonSpan // an object's member names, in order
	vals       []*jsonSpan // object members (in keys order) or array items
}

// member returns an object's member named key, or nil.
func (s *jsonSpan) member(key string) *jsonSpan {
	if s == nil || s.kind != '{' {
		return nil
	}
	if i := slices.IndexFunc(s.keys, func(k *jsonSpan) bool { return k.str == key }); i >= 0 {
		return s.vals[i]
	}
	return nil
}

// jsonParser parses JSON with // and /* */ comments, which VS Code and
// Gemini CLI allow in their settings files.
type jsonParser struct {
	text string
	pos  int
}

// parseJSONSpans parses a whole settings file, after a UTF-8 byte order
// mark if it starts with one; nothing but comments and space may follow its
// one value.
func parseJSONSpans(text string) (*jsonSpan, error) {
	p := &jsonParser{text: text}
	if strings.HasPrefix(text, "\ufeff") {
		p.pos = len("\ufeff")
	}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if p.skip(); p.pos != len(text) {
		return nil, fmt.Errorf("unexpected text at byte %d", p.pos)
	}
	return v, nil
}

// skip passes whitespace and comments.
func (p *jsonParser) skip() {
	for p.pos < len(p.text) {
		switch {
		case strings.IndexByte(" \t\r\n", p.text[p.pos]) >= 0:
			p.pos++
		// A comment runs past its end, or to the end of the file.
		case strings.HasPrefix(p.text[p.pos:], "//"):
			_, rest, _ := strings.Cut(p.text[p.pos:], "\n")
			p.pos = len(p.text) - len(rest)
		case strings.HasPrefix(p.text[p.pos:], "/*"):
			_, rest, _ := strings.Cut(p.text[p.pos+2:], "*/")
			p.pos = len(p.text) - len(rest)
		default:
			return
		}
	}
}

// value parses the value at p.pos, at nesting level depth, and leaves
// p.pos after it, accepting comments and trailing commas; numbers and
// literals are kept as text, since no edit reads them.
func (p *jsonParser) value(depth int) (*jsonSpan, error) {
	p.skip()
	if p.pos >= len(p.text) {
		return nil, fmt.Errorf("unexpected end of file")
	}
	v := &jsonSpan{start: p.pos, depth: depth, kind: p.text[p.pos]}
	switch v.kind {
	case '{', '[':
		if err := p.members(v); err != nil {
			return nil, err
		}
	case '"':
		if err := p.quoted(v); err != nil {
			return nil, err
		}
	default:
		end := p.pos
		for end < len(p.text) && strings.IndexByte(",]} \t\r\n/", p.text[end]) < 0 {
			end++
		}
		if end == p.pos {
			return nil, fmt.Errorf("unexpected %q at byte %d", p.text[p.pos], p.pos)
		}
		v.kind, p.pos = 'v', end
	}
	v.end = p.pos
	return v, nil
}

// members parses the object or array v opens at p.pos into v.keys and
// v.vals, up to and including its closing bracket.
func (p *jsonParser) members(v *jsonSpan) error {
	closing := map[byte]byte{'{': '}', '[': ']'}[v.kind]
	p.pos++
	for first := true; ; first = false {
		p.skip()
		if !first && p.pos < len(p.text) && p.text[p.pos] == ',' { // a trailing one too: the bracket may follow
			p.pos++
			p.skip()
		} else if !first && (p.pos >= len(p.text) || p.text[p.pos] != closing) {
			return fmt.Errorf("expected , at byte %d", p.pos)
		}
		if p.pos < len(p.text) && p.text[p.pos] == closing {
			p.pos++
			return nil
		}
		if v.kind == '{' {
			k, err := p.value(v.depth + 1)
			if err != nil || k.kind != '"' {
				return fmt.Errorf("expected a key at byte %d", p.pos)
			}
			p.skip()
			if p.pos >= len(p.text) || p.text[p.pos] != ':' {
				return fmt.Errorf("expected : at byte %d", p.pos)
			}
			p.pos++
			v.keys = append(v.keys, k)
		}
		item, err := p.value(v.depth + 1)
		if err != nil {
			return err
		}
		v.vals = append(v.vals, item)
	}
}

// quoted parses the string v starts at p.pos into v.str, decoding every
// JSON escape; the text itself keeps its bytes.
func (p *jsonParser) quoted(v *jsonSpan) error {
	end := p.pos + 1
	for end < len(p.text) && p.text[end] != '"' {
		if p.text[end] == '\\' {
			end++
		}
		end++
	}
	if end >= len(p.text) {
		return fmt.Errorf("unterminated string at byte %d", p.pos)
	}
	var s string
	if err := json.Unmarshal([]byte(p.text[p.pos:end+1]), &s); err != nil {
		return fmt.Errorf("bad string at byte %d: %w", p.pos, err)
	}
	v.str, p.pos = s, end+1
	return nil
}

// jsonEdit replaces text[start:end] with insert.
type jsonEdit struct {
	start, end int
	insert     string
}

// applyEdits applies non-overlapping edits to text. Inserted lines end
// in CRLF in a file that has any, as Windows editors write them.
func applyEdits(text string, edits []jsonEdit) string {
	var b strings.Builder
	pos := 0
	nl := map[bool]string{false: "\n", true: "\r\n"}[strings.Contains(text, "\r\n")]
	edits = slices.Clone(edits) // sorted stably: edits at one offset keep their order
	slices.SortStableFunc(edits, func(a, b jsonEdit) int { return a.start - b.start })
	for _, e := range edits {
		b.WriteString(text[pos:e.start])
		b.WriteString(strings.ReplaceAll(e.insert, "\n", nl))
		pos = e.end
	}
	b.WriteString(text[pos:])
	return b.String()
}

// indentUnit guesses the file's indentation from its first indented line.
func indentUnit(text string) string {
	for _, line := range strings.Split(text, "\n")[1:] {
		trimmed := strings.TrimLeft(line, " \t")
		if trimmed != "" && len(trimmed) < len(line) {
			return line[:len(line)-len(trimmed)]
		}
	}
	return "  "
}

// appendRaw adds item, the text of an array item or of an object member
// already indented for depth container.depth+1, after the container's last
// item in text, or after any comment in it when it has none.
func appendRaw(text string, container *jsonSpan, item, unit string) jsonEdit {
	inner := strings.Repeat(unit, container.depth+1)
	if len(container.vals) == 0 {
		from := container.start + 1 + len(strings.TrimRight(text[container.start+1:container.end-1], " \t\r\n"))
		return jsonEdit{from, container.end - 1, "\n" + inner + item + "\n" + strings.Repeat(unit, container.depth)}
	}
	last := container.vals[len(container.vals)-1]
	return jsonEdit{last.end, last.end, ",\n" + inner + item}
}

// removeItem deletes item i of an array or object (a member with its
// name) with the separator before it, or after it for the first item; the
// only item goes with all between the brackets.
func removeItem(container *jsonSpan, i int) jsonEdit {
	switch {
	case len(container.vals) == 1:
		return jsonEdit{container.start + 1, container.end - 1, ""}
	case i > 0:
		return jsonEdit{container.vals[i-1].end, container.vals[i].end, ""}
	case container.kind == '{':
		return jsonEdit{container.keys[0].start, container.keys[1].start, ""}
	}
	return jsonEdit{container.vals[0].start, container.vals[1].start, ""}
}
