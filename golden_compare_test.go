package main

// This file is how a replayed answer is judged against a transcript (the
// replay is golden_test.go): normalize puts the transcript's placeholders
// into an answer, compareLines checks it byte for byte against the expected
// value as reDump renders it (the original's json.dumps), then come the
// checks of the error-regex, list-order and unordered steps, and the
// path-by-path diff a mismatch is reported with.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// normalize replaces group ids, timestamps and serverInfo.version with the
// placeholders the transcripts were recorded with.
func (s *goldenSession) normalize(v any) any {
	switch x := v.(type) {
	case string:
		x = goldenGroupRE.ReplaceAllStringFunc(x, s.placeholder)
		return goldenTimestampRE.ReplaceAllString(x, "<ts>")
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = s.normalize(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // deterministic placeholder order within one object
		for _, k := range goldenKeyOrder(keys) {
			out[k] = s.normalize(x[k])
		}
		for _, key := range []string{"serverInfo", metaServerInfo} {
			if info, ok := out[key].(map[string]any); ok {
				if _, ok := info["version"]; ok {
					info["version"] = "<version>"
				}
			}
		}
		if info, ok := out["serverInfo"].(map[string]any); ok && !s.fullInfo {
			// A deliberate deviation (testdata/golden/README.md): from
			// 2025-06-18 on, serverInfo also has the title, description and
			// websiteUrl the revision defines; testdata/protocol checks them.
			if rev, _ := out["protocolVersion"].(string); rev >= revTyped {
				delete(info, "title")
				delete(info, "description")
				delete(info, "websiteUrl")
			}
		}
		return out
	}
	return v
}

// goldenKeyOrder puts "id" and "result" before other keys so that group ids
// get placeholders in the order a reader of the transcript sees them.
func goldenKeyOrder(keys []string) []string {
	slices.SortStableFunc(keys, func(a, b string) int {
		rank := func(k string) int {
			switch k {
			case "id", "result", "error":
				return 0
			}
			return 1
		}
		return rank(a) - rank(b)
	})
	return keys
}

// goldenInfoTitleRE and goldenInfoMoreRE find the serverInfo fields that
// 2025-06-18 and 2025-11-25 add (a deliberate deviation, see normalize).
var (
	goldenInfoTitleRE = regexp.MustCompile(`("serverInfo": \{"name": "crosstalk"), "title": "Crosstalk"`)
	goldenInfoMoreRE  = regexp.MustCompile(`("serverInfo": \{"name": "crosstalk", "version": "(?:[^"\\]|\\.)*"), "description": "(?:[^"\\]|\\.)*", "websiteUrl": "(?:[^"\\]|\\.)*"`)
)

// compareLines checks each output line byte for byte against the expected
// value rendered as Python's json.dumps renders it, after normalization.
// It catches what a structural comparison cannot: key order, separators and
// escaping in the envelope.
func (s *goldenSession) compareLines(expect json.RawMessage, raw []string) []string {
	var lines []json.RawMessage
	if err := json.Unmarshal(expect, &lines); err != nil || len(lines) != len(raw) {
		return []string{fmt.Sprintf("transcript expect: %v", err)}
	}
	var diffs []string
	for i, want := range lines {
		w, err := reDump(want)
		if err != nil {
			return []string{fmt.Sprintf("render expect: %v", err)}
		}
		g := goldenGroupRE.ReplaceAllStringFunc(raw[i], s.placeholder)
		g = goldenTimestampRE.ReplaceAllString(g, "<ts>")
		if !s.fullInfo {
			g = goldenInfoTitleRE.ReplaceAllString(g, "$1")
			g = goldenInfoMoreRE.ReplaceAllString(g, "$1")
		}
		g = goldenVersionRE.ReplaceAllString(g, `$1"<version>"`)
		if g != w {
			at := goldenFirstDiff(w, g)
			diffs = append(diffs, fmt.Sprintf("line %d: same JSON, different bytes at offset %d: got …%q…; want …%q…",
				i, at, goldenWindow(g, at), goldenWindow(w, at)))
		}
	}
	return diffs
}

// reDump renders JSON with the key order it was written in, the way
// Python's json.dumps does by default: ", " and ": " separators and every
// character outside printable ASCII escaped.
func reDump(data []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var b strings.Builder
	var render func() error
	render = func() error {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case json.Delim:
			closing := map[json.Delim]string{'{': "}", '[': "]"}[v]
			b.WriteString(v.String())
			for i := 0; d.More(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				if v == '{' {
					key, err := d.Token()
					if err != nil {
						return err
					}
					pyString(&b, key.(string))
					b.WriteString(": ")
				}
				if err := render(); err != nil {
					return err
				}
			}
			if _, err := d.Token(); err != nil {
				return err
			}
			b.WriteString(closing)
		case string:
			pyString(&b, v)
		case json.Number:
			b.WriteString(v.String())
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case nil:
			b.WriteString("null")
		}
		return nil
	}
	if err := render(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// pyString writes s as a JSON string with ensure_ascii escaping.
func pyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r >= 0x20 && r <= 0x7e:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
}

// isErrorAnswer reports whether a response is a JSON-RPC error or a tool
// result flagged isError.
func isErrorAnswer(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	if _, ok := m["error"]; ok {
		return true
	}
	r, ok := m["result"].(map[string]any)
	return ok && r["isError"] == true
}

func checkToolErrorRegex(t *testing.T, where string, got []any, raw []string, pattern string) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	fail := func(why string) {
		t.Errorf("%s:\n  got  %s\n  want a tool error matching %q (%s)", where, strings.Join(raw, "\n       "), pattern, why)
	}
	if len(got) != 1 {
		fail("one answer")
		return
	}
	m, _ := got[0].(map[string]any)
	r, _ := m["result"].(map[string]any)
	if r == nil || r["isError"] != true {
		fail("isError true")
		return
	}
	content, _ := r["content"].([]any)
	if len(content) != 1 {
		fail("one content item")
		return
	}
	item, _ := content[0].(map[string]any)
	text, _ := item["text"].(string)
	var body map[string]string
	if err := json.Unmarshal([]byte(text), &body); err != nil || len(body) != 1 || !re.MatchString(body["error"]) {
		fail("text {\"error\": MATCHING}")
	}
}

// checkListOrder verifies, on the raw answers, that list_groups and
// resources/list are sorted by group id as the original sorts them.
func checkListOrder(responses []any) []string {
	var problems []string
	for _, r := range responses {
		m, _ := r.(map[string]any)
		res, _ := m["result"].(map[string]any)
		if res == nil {
			continue
		}
		var keys []string
		if list, ok := res["resources"].([]any); ok {
			for _, e := range list {
				em, _ := e.(map[string]any)
				uri, _ := em["uri"].(string)
				keys = append(keys, uri)
			}
		}
		if text := goldenToolText(res); text != "" {
			var body struct {
				Groups []struct {
					GroupID string `json:"group_id"`
				} `json:"groups"`
			}
			if json.Unmarshal([]byte(text), &body) == nil {
				for _, g := range body.Groups {
					keys = append(keys, g.GroupID)
				}
			}
		}
		if !sort.StringsAreSorted(keys) {
			problems = append(problems, fmt.Sprintf("list order: got %q; want sorted by group id", keys))
		}
	}
	return problems
}

func goldenToolText(result map[string]any) string {
	content, _ := result["content"].([]any)
	if len(content) != 1 {
		return ""
	}
	item, _ := content[0].(map[string]any)
	text, _ := item["text"].(string)
	return text
}

// canonicalUnordered sorts the lists whose order depends on random group
// ids: resources/list by uri, and the groups of a list_groups text by their
// exact bytes (keeping the text's formatting comparable byte for byte).
func canonicalUnordered(answers []any) []any {
	out := make([]any, len(answers))
	for i, a := range answers {
		m, ok := a.(map[string]any)
		if !ok {
			out[i] = a
			continue
		}
		res, ok := m["result"].(map[string]any)
		if !ok {
			out[i] = a
			continue
		}
		if list, ok := res["resources"].([]any); ok {
			sorted := slices.Clone(list)
			sort.SliceStable(sorted, func(x, y int) bool { return goldenJSON(sorted[x]) < goldenJSON(sorted[y]) })
			res["resources"] = sorted
		}
		if text := goldenToolText(res); text != "" {
			var body struct {
				Groups []json.RawMessage `json:"groups"`
			}
			if json.Unmarshal([]byte(text), &body) == nil && len(body.Groups) > 1 {
				parts := make([]string, len(body.Groups))
				for j, g := range body.Groups {
					parts[j] = string(g)
				}
				if text == `{"groups": [`+strings.Join(parts, ", ")+`]}` {
					sort.Strings(parts)
					res["content"].([]any)[0].(map[string]any)["text"] = `{"groups": [` + strings.Join(parts, ", ") + `]}`
				}
			}
		}
		out[i] = m
	}
	return out
}

// goldenDiff appends a line for every difference between want and got. Text
// fields holding JSON are compared structurally first and then byte for byte.
func goldenDiff(path string, want, got any, diffs *[]string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: got %s; want %s", path, goldenTruncate(goldenJSON(got), 300), goldenTruncate(goldenJSON(want), 300)))
			return
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			wv, inW := w[k]
			gv, inG := g[k]
			switch {
			case !inW:
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: got extra key with %s; want no such key", path, k, goldenTruncate(goldenJSON(gv), 200)))
			case !inG:
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: got no such key; want %s", path, k, goldenTruncate(goldenJSON(wv), 200)))
			default:
				goldenDiff(path+"."+k, wv, gv, diffs)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			*diffs = append(*diffs, fmt.Sprintf("%s: got %s; want %s", path, goldenTruncate(goldenJSON(got), 600), goldenTruncate(goldenJSON(want), 600)))
			return
		}
		for i := range w {
			goldenDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], diffs)
		}
	case json.Number:
		g, ok := got.(json.Number)
		wr, _ := new(big.Rat).SetString(string(w))
		var gr *big.Rat
		if ok {
			gr, _ = new(big.Rat).SetString(string(g))
		}
		if wr == nil || gr == nil || wr.Cmp(gr) != 0 {
			*diffs = append(*diffs, fmt.Sprintf("%s: got %s; want %s", path, goldenJSON(got), w))
		}
	case string:
		g, ok := got.(string)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: got %s; want %q", path, goldenTruncate(goldenJSON(got), 300), w))
			return
		}
		if w == g {
			return
		}
		if strings.HasSuffix(path, ".text") && (strings.HasPrefix(w, "{") || strings.HasPrefix(w, "[")) {
			wj, werr := decodeGolden([]byte(w))
			gj, gerr := decodeGolden([]byte(g))
			if werr == nil && gerr == nil {
				before := len(*diffs)
				goldenDiff(path+"⟨json⟩", wj, gj, diffs)
				if len(*diffs) == before {
					at := goldenFirstDiff(w, g)
					*diffs = append(*diffs, fmt.Sprintf("%s: same JSON, different bytes at offset %d: got …%q…; want …%q…",
						path, at, goldenWindow(g, at), goldenWindow(w, at)))
				}
				return
			}
		}
		*diffs = append(*diffs, fmt.Sprintf("%s: got %q; want %q", path, goldenTruncate(g, 400), goldenTruncate(w, 400)))
	default:
		if !reflect.DeepEqual(want, got) {
			*diffs = append(*diffs, fmt.Sprintf("%s: got %s; want %s", path, goldenTruncate(goldenJSON(got), 300), goldenJSON(want)))
		}
	}
}

func goldenFirstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func goldenWindow(s string, at int) string {
	lo, hi := max(0, at-30), min(len(s), at+40)
	return s[lo:hi]
}

// goldenJSON renders a value canonically (sorted keys) for messages and sets.
func goldenJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func goldenTruncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("…(%d bytes)", len(s))
}
