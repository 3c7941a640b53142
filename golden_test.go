package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
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
