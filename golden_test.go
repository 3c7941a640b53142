package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// goldenStep is one line of a golden transcript: a request line with the
// answers it must produce, a barrier for asynchronous notifications, or the
// expected exit status. testdata/golden/README.md describes the format.
type goldenStep struct {
	Send                 *string          `json:"send"`
	Expect               json.RawMessage  `json:"expect"`
	Await                *json.RawMessage `json:"await"`
	Exit                 *int             `json:"exit"`
	SQL                  *string          `json:"sql"`
	Group                string           `json:"group"`
	Remove               *string          `json:"remove"`
	Note                 string           `json:"note"`
	Unordered            bool             `json:"unordered"`
	Deviation            string           `json:"deviation"`
	ExpectToolErrorRegex string           `json:"expect_tool_error_regex"`
	ExpectAnyError       bool             `json:"expect_any_error"`
}

// goldenHeader is the first line of a transcript.
type goldenHeader struct {
	Transcript  string            `json:"transcript"`
	Description string            `json:"description"`
	Env         map[string]string `json:"env"`
}

// Generous bounds: the race detector slows the server several times over,
// and a wrong answer must fail on its content, never on a timeout.
const (
	goldenReplyTimeout  = 20 * time.Second
	goldenNotifyTimeout = 15 * time.Second
)

var (
	goldenGroupRE       = regexp.MustCompile(`grp_[0-9a-f]{32}`)
	goldenTimestampRE   = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{6})?\+00:00`)
	goldenPlaceholderRE = regexp.MustCompile(`<grp:\d+>`)
)

func TestGoldenTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("glob golden transcripts: %v, %d files; want some", err, len(files))
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".jsonl"), func(t *testing.T) {
			header, steps := readGoldenTranscript(t, file)
			replayGolden(t, header, steps)
		})
	}
}

// readGoldenTranscript parses a transcript file into its header and steps.
func readGoldenTranscript(t *testing.T, file string) (goldenHeader, []goldenStep) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var header goldenHeader
	if err := json.Unmarshal([]byte(lines[0]), &header); err != nil || header.Transcript == "" {
		t.Fatalf("%s: header %q: %v", file, lines[0], err)
	}
	steps := make([]goldenStep, 0, len(lines)-1)
	for i, line := range lines[1:] {
		var s goldenStep
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("%s:%d: %v", file, i+2, err)
		}
		steps = append(steps, s)
	}
	return header, steps
}

// goldenSession drives one in-process server over pipes and keeps the
// mapping between real group ids and the transcript's placeholders.
type goldenSession struct {
	t      *testing.T
	dir    string
	stdin  *io.PipeWriter
	lines  chan []byte
	exit   chan int
	stderr *syncBuffer
	syncs  int
	quiet  bool // no notifications may arrive at all
	// fullInfo keeps serverInfo's title, description and websiteUrl, which
	// the golden transcripts strip (see normalize); testdata/protocol
	// checks them.
	fullInfo bool
	poll     time.Duration
	pending  []any

	literal map[string]bool   // group ids written literally in the transcript
	toPH    map[string]string // real id -> placeholder
	fromPH  map[string]string // placeholder -> real id
}

// startGoldenSession runs the server in-process on groups directory dir
// with the given environment; group ids written literally in steps are not
// replaced by placeholders.
func startGoldenSession(t *testing.T, dir string, env map[string]string, steps []goldenStep) *goldenSession {
	t.Helper()
	t.Setenv("CROSSTALK_GROUPS_DIR", dir)
	t.Setenv("CROSSTALK_OBSERVABILITY_RETENTION_DAYS", "")
	os.Unsetenv("CROSSTALK_OBSERVABILITY_RETENTION_DAYS")
	t.Setenv("CROSSTALK_POLL_INTERVAL_SECONDS", "")
	os.Unsetenv("CROSSTALK_POLL_INTERVAL_SECONDS")
	// The transcripts record the original's poll-only timing (with a 3600 s
	// interval no notification may come at all), so they replay with file
	// events off; routing_subscriptions_test.go and the end-to-end tests
	// cover notification by file event.
	t.Setenv("CROSSTALK_FILE_EVENTS", "off")
	for k, v := range env {
		t.Setenv(k, v)
	}
	s := &goldenSession{
		t:       t,
		dir:     dir,
		lines:   make(chan []byte, 4096),
		exit:    make(chan int, 1),
		stderr:  &syncBuffer{},
		literal: map[string]bool{},
		toPH:    map[string]string{},
		fromPH:  map[string]string{},
		poll:    goldenPollInterval(env["CROSSTALK_POLL_INTERVAL_SECONDS"]),
	}
	s.quiet = s.poll >= time.Hour
	for _, st := range steps {
		if st.Send != nil {
			for _, id := range goldenGroupRE.FindAllString(*st.Send, -1) {
				s.literal[id] = true
			}
		}
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s.stdin = inW
	go func() {
		code := run(nil, inR, outW, s.stderr)
		outW.Close()
		s.exit <- code
	}()
	go func() {
		r := bufio.NewReader(outR)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				s.lines <- line
			}
			if err != nil {
				close(s.lines)
				io.Copy(io.Discard, outR)
				return
			}
		}
	}()
	t.Cleanup(func() { inW.Close() })
	return s
}

// goldenPollInterval is the subscription poll interval a transcript asks
// for; quiet transcripts set an hour so that no notification is due.
func goldenPollInterval(value string) time.Duration {
	v, err := strconv.ParseFloat(value, 64)
	if err != nil || v <= 0 {
		return 500 * time.Millisecond
	}
	return time.Duration(v * float64(time.Second))
}

// write sends one line, bounded in time in case the server stopped reading.
func (s *goldenSession) write(line string) error {
	done := make(chan error, 1)
	go func() {
		_, err := io.WriteString(s.stdin, line+"\n")
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(goldenReplyTimeout):
		return fmt.Errorf("server did not read the line within %v", goldenReplyTimeout)
	}
}

// decodeGolden decodes JSON keeping numbers exact.
func decodeGolden(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

// isNotification reports whether an output value is a server notification.
func isNotification(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, hasMethod := m["method"]
	_, hasID := m["id"]
	return hasMethod && !hasID
}

// exchange sends line and returns every response written before the answer
// to a following sync ping; notifications go to pending.
func (s *goldenSession) exchange(line string) ([]any, []string, error) {
	s.syncs++
	syncID := fmt.Sprintf("__sync__%d", s.syncs)
	if err := s.write(line); err != nil {
		return nil, nil, err
	}
	if err := s.write(`{"jsonrpc":"2.0","id":"` + syncID + `","method":"ping"}`); err != nil {
		return nil, nil, err
	}
	var responses []any
	var raw []string
	deadline := time.After(goldenReplyTimeout)
	for {
		select {
		case b, ok := <-s.lines:
			if !ok {
				return responses, raw, fmt.Errorf("server closed stdout; stderr: %s", s.stderr.String())
			}
			v, err := decodeGolden(b)
			if err != nil {
				return responses, raw, fmt.Errorf("output line is not JSON: %q: %v", b, err)
			}
			if m, ok := v.(map[string]any); ok && m["id"] == syncID {
				if !reflect.DeepEqual(m, map[string]any{"jsonrpc": "2.0", "id": syncID, "result": map[string]any{}}) {
					return responses, raw, fmt.Errorf("sync ping answer: got %s; want an empty result", b)
				}
				return responses, raw, nil
			}
			if isNotification(v) {
				s.pending = append(s.pending, v)
				continue
			}
			responses = append(responses, v)
			raw = append(raw, strings.TrimRight(string(b), "\n"))
		case <-deadline:
			return responses, raw, fmt.Errorf("no answer to the sync ping within %v", goldenReplyTimeout)
		}
	}
}

func (s *goldenSession) placeholder(id string) string {
	if s.literal[id] {
		return id
	}
	ph, ok := s.toPH[id]
	if !ok {
		ph = fmt.Sprintf("<grp:%d>", len(s.toPH)+1)
		s.toPH[id] = ph
		s.fromPH[ph] = id
	}
	return ph
}

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

// substitute replaces placeholders in a request line with real group ids.
func (s *goldenSession) substitute(line string) (string, error) {
	var missing string
	out := goldenPlaceholderRE.ReplaceAllStringFunc(line, func(ph string) string {
		id, ok := s.fromPH[ph]
		if !ok {
			missing = ph
			return ph
		}
		return id
	})
	if missing != "" {
		return "", fmt.Errorf("placeholder %s has no group yet (an earlier step did not create it)", missing)
	}
	return out, nil
}

func replayGolden(t *testing.T, header goldenHeader, steps []goldenStep) {
	startGoldenSession(t, t.TempDir(), header.Env, steps).replay(steps)
}

// replay runs every step of a transcript in s.
func (s *goldenSession) replay(steps []goldenStep) {
	t := s.t
	for i, st := range steps {
		label := fmt.Sprintf("step %d", i+1)
		if st.Note != "" {
			label += " (" + st.Note + ")"
		}
		switch {
		case st.Send != nil:
			s.replaySend(label, st)
		case st.Await != nil:
			s.replayAwait(label, *st.Await)
		case st.Exit != nil:
			s.finish(*st.Exit)
		case st.SQL != nil:
			s.foreignSQL(label, st.Group, *st.SQL)
		case st.Remove != nil:
			s.foreignRemove(label, *st.Remove)
		default:
			t.Fatalf("%s: step has neither send, await nor exit", label)
		}
	}
}

func (s *goldenSession) replaySend(label string, st goldenStep) {
	t := s.t
	line, err := s.substitute(*st.Send)
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	responses, raw, err := s.exchange(line)
	if err != nil {
		t.Fatalf("%s: send %s: %v", label, line, err)
	}
	if s.quiet && len(s.pending) > 0 {
		t.Errorf("%s: send %s: got notifications %s; want none (poll interval %v)", label, line, goldenJSON(s.pending), s.poll)
		s.pending = nil
	}
	for _, out := range raw {
		if i := strings.IndexFunc(out, func(r rune) bool { return r > 0x7e || r < 0x20 }); i >= 0 {
			t.Errorf("%s: send %s: output byte %d of %q is not printable ASCII; the original escapes everything (json.dumps ensure_ascii)",
				label, line, i, goldenTruncate(out, 200))
		}
	}
	if st.Unordered {
		for _, msg := range checkListOrder(responses) {
			t.Errorf("%s: send %s: %s", label, line, msg)
		}
	}
	got := make([]any, len(responses))
	for i, r := range responses {
		got[i] = s.normalize(r)
	}
	where := fmt.Sprintf("%s: send %s", label, line)
	if st.Deviation != "" {
		where += " [deviation: " + st.Deviation + "]"
	}
	switch {
	case st.ExpectToolErrorRegex != "":
		checkToolErrorRegex(t, where, got, raw, st.ExpectToolErrorRegex)
		return
	case st.ExpectAnyError:
		if len(got) != 1 || !isErrorAnswer(got[0]) {
			t.Errorf("%s:\n  got  %s\n  want one error answer (JSON-RPC error or isError tool result)", where, strings.Join(raw, "\n       "))
		}
		return
	}
	want, err := decodeGolden(st.Expect)
	if err != nil {
		t.Fatalf("%s: transcript expect: %v", label, err)
	}
	wantList, ok := want.([]any)
	if !ok {
		t.Fatalf("%s: transcript expect is not a list", label)
	}
	if st.Unordered {
		wantList = canonicalUnordered(wantList)
		got = canonicalUnordered(got)
	}
	var diffs []string
	goldenDiff("$", wantList, got, &diffs)
	if len(diffs) == 0 && !st.Unordered {
		diffs = s.compareLines(st.Expect, raw)
	}
	if len(diffs) > 0 {
		if len(diffs) > 12 {
			diffs = append(diffs[:12], fmt.Sprintf("... and %d more", len(diffs)-12))
		}
		t.Errorf("%s:\n  %s\n  raw answer: %s", where, strings.Join(diffs, "\n  "), goldenTruncate(strings.Join(raw, "\n              "), 1500))
	}
}

// goldenVersionRE finds serverInfo.version in a raw line, in an initialize
// result or (2026-07-28) in a result's _meta, with or without a title.
var goldenVersionRE = regexp.MustCompile(`("(?:io\.modelcontextprotocol/)?serverInfo": \{"name": "crosstalk", (?:"title": "Crosstalk", )?"version": )"(?:[^"\\]|\\.)*"`)

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

// replayAwait waits until every expected notification arrived, then a little
// longer to catch extra ones, and compares them as a set.
func (s *goldenSession) replayAwait(label string, raw json.RawMessage) {
	t := s.t
	v, err := decodeGolden(raw)
	if err != nil {
		t.Fatalf("%s: transcript await: %v", label, err)
	}
	want := map[string]bool{}
	for _, n := range v.([]any) {
		want[goldenJSON(n)] = true
	}
	got := map[string]bool{}
	collect := func() {
		for _, n := range s.pending {
			got[goldenJSON(s.normalize(n))] = true
		}
		s.pending = nil
	}
	complete := func() bool {
		for k := range want {
			if !got[k] {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(goldenNotifyTimeout)
	for collect(); !complete() && time.Now().Before(deadline); collect() {
		if !s.readNotifications(label, 50*time.Millisecond) {
			return
		}
	}
	// Extra notifications would come within a few poll intervals.
	s.readNotifications(label, 3*s.poll+300*time.Millisecond)
	collect()
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("%s: notifications differ\n  missing: %s\n  extra:   %s", label, strings.Join(missing, "\n           "), strings.Join(extra, "\n           "))
	}
}

// readNotifications reads output for d; a response here is an error.
func (s *goldenSession) readNotifications(label string, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case b, ok := <-s.lines:
			if !ok {
				s.t.Errorf("%s: server closed stdout while waiting for notifications", label)
				return false
			}
			v, err := decodeGolden(b)
			if err != nil || !isNotification(v) {
				s.t.Errorf("%s: got unexpected output %q while waiting for notifications", label, b)
				continue
			}
			s.pending = append(s.pending, v)
		case <-timer.C:
			return true
		}
	}
}

// finish closes stdin and checks the exit status and that nothing else was written.
func (s *goldenSession) finish(want int) {
	t := s.t
	s.stdin.Close()
	select {
	case code := <-s.exit:
		if code != want {
			t.Errorf("exit status: got %d; want %d; stderr: %s", code, want, s.stderr.String())
		}
	case <-time.After(goldenReplyTimeout):
		t.Fatalf("server did not exit within %v after stdin closed", goldenReplyTimeout)
	}
	for b := range s.lines {
		v, err := decodeGolden(b)
		if err == nil && isNotification(v) && !s.quiet {
			continue // a late reminder or deletion signal after the last barrier is harmless
		}
		t.Errorf("after stdin closed: got output %q; want none", b)
	}
	if len(s.pending) > 0 && s.quiet {
		t.Errorf("got notifications %s; want none", goldenJSON(s.pending))
	}
}

// foreignPath is the database file of a group named by placeholder.
func (s *goldenSession) foreignPath(label, placeholder string) string {
	id, err := s.substitute(placeholder)
	if err != nil {
		s.t.Fatalf("%s: %v", label, err)
	}
	return filepath.Join(s.dir, id+".sqlite3")
}

// foreignSQL plays another process writing to a group database while the
// server runs, as a second server or an older client would.
func (s *goldenSession) foreignSQL(label, group, statement string) {
	path := s.foreignPath(label, group)
	// A generous busy timeout: the server may hold the write lock briefly.
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		s.t.Fatalf("%s: open %s: %v", label, path, err)
	}
	defer db.Close()
	if _, err := db.Exec(statement); err != nil {
		s.t.Fatalf("%s: %s: %v", label, statement, err)
	}
}

// foreignRemove deletes a group's files behind the server's back.
func (s *goldenSession) foreignRemove(label, group string) {
	path := s.foreignPath(label, group)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !os.IsNotExist(err) {
			s.t.Fatalf("%s: remove %s: %v", label, path+suffix, err)
		}
	}
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
